package nodev1

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// fill sets every field of the value v points to, recursively, to a value
// that is not the zero one, so that a field a conversion forgets shows.
func fill(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), n)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(1_700_000_000+int64(*n), int64(*n)).UTC()))
			return
		}
		for i := range v.NumField() {
			fill(t, v.Field(i), n)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage{}) {
			v.SetBytes([]byte(`{"n":1}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), n)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, n)
		fill(t, e, n)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("s" + string(rune('a'+*n%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint64, reflect.Uint8:
		v.SetUint(uint64(*n % 200))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	default:
		t.Fatalf("fill: no rule for %v", v.Type())
	}
}

func filled[T any](t *testing.T) T {
	var v T
	n := 0
	fill(t, reflect.ValueOf(&v).Elem(), &n)
	return v
}

// TestWireRoundTrip converts each type, every field set, to its message and
// back: what comes back is what went, so no field is forgotten on the way.
func TestWireRoundTrip(t *testing.T) {
	check := func(name string, sent, got any) {
		t.Helper()
		if !reflect.DeepEqual(sent, got) {
			t.Errorf("%s: sent %+v, got back %+v", name, sent, got)
		}
	}
	ex := filled[Execution](t)
	check("Execution", ex, ExecutionFromWire(ex.ToWire()))
	execs := []Execution{ex, filled[Execution](t)}
	check("[]Execution", execs, ExecutionsFromWire(ExecutionsToWire(execs)))
	start := filled[StartExecution](t)
	check("StartExecution", start, StartExecutionFromWire(start.ToWire()))
	st := filled[ExecStats](t)
	check("ExecStats", st, ExecStatsFromWire(st.ToWire()))
	snap := filled[Snapshot](t)
	check("Snapshot", snap, SnapshotFromWire(snap.ToWire()))
	arts := filled[Artifacts](t)
	check("Artifacts", arts, ArtifactsFromWire(arts.ToWire()))
	p := filled[Progress](t)
	check("Progress", p, ProgressFromWire(p.ToWire()))
	ready := filled[TemplateReady](t)
	check("TemplateReady", ready, TemplateReadyFromWire(ready.ToWire()))
	orphans := filled[Orphans](t)
	check("Orphans", orphans, OrphansFromWire(orphans.ToWire()))
	info := filled[Info](t)
	check("Info", info, InfoFromWire(info.ToWire()))
	pools := filled[[]PoolStatus](t)
	check("[]PoolStatus", pools, PoolStatusesFromWire(PoolStatusesToWire(pools)))
	targets := filled[[]PoolTarget](t)
	check("[]PoolTarget", &targets, PoolTargetsFromWire(PoolTargetsToWire(&targets)))
	retire := filled[[]Retirement](t)
	check("[]Retirement", retire, RetirementsFromWire(RetirementsToWire(retire)))
	resolve := filled[ResolveCredential](t)
	check("ResolveCredential", resolve, ResolveCredentialFromWire(resolve.ToWire("n1")))
	resolved := filled[ResolvedCredential](t)
	check("ResolvedCredential", resolved, ResolvedCredentialFromWire(resolved.ToWire()))
}

// TestWireKeepsAbsence: what "absent" means survives the wire: no pool
// targets (leave the pool as it is) is not an empty list (drain it), and
// zero times stay zero.
func TestWireKeepsAbsence(t *testing.T) {
	if got := PoolTargetsFromWire(PoolTargetsToWire(nil)); got != nil {
		t.Errorf("absent pool targets came back as %v", *got)
	}
	empty := []PoolTarget{}
	if got := PoolTargetsFromWire(PoolTargetsToWire(&empty)); got == nil || len(*got) != 0 {
		t.Errorf("an empty pool target list came back as %v", got)
	}
	if got := ExecutionFromWire(Execution{ExecID: "x"}.ToWire()); !got.StartedAt.IsZero() || !got.LastActivity.IsZero() {
		t.Errorf("zero times came back as %v and %v", got.StartedAt, got.LastActivity)
	}
}
