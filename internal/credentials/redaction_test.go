package credentials

import (
	"context"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestRecordRedaction(t *testing.T) {
	m, _, audit, clk := newTestManager(t)
	r := Redaction{
		Request:      Request{Tenant: "t1", Project: "p1", Sandbox: "sb1", ExecutionID: "e1", Host: "API.example.com."},
		CredentialID: "c1", Where: "body", Count: 3,
	}
	if err := m.RecordRedaction(context.Background(), r); err != nil {
		t.Fatalf("RecordRedaction: %v", err)
	}
	got := audit.Entries()
	want := AuditEntry{
		Kind: KindRedaction, Time: clk.Now(), Tenant: "t1", Project: "p1", Sandbox: "sb1", ExecutionID: "e1",
		Host: "api.example.com", CredentialID: "c1", Reason: ReasonRedacted, Where: "body", Count: 3,
	}
	if len(got) != 1 || got[0] != want {
		t.Errorf("audit = %+v, want %+v", got, want)
	}
	for name, bad := range map[string]func(*Redaction){
		"no tenant":     func(r *Redaction) { r.Tenant = "" },
		"bad host":      func(r *Redaction) { r.Host = "a b" },
		"no credential": func(r *Redaction) { r.CredentialID = "" },
		"where":         func(r *Redaction) { r.Where = "cookie" },
		"zero count":    func(r *Redaction) { r.Count = 0 },
	} {
		b := r
		bad(&b)
		if err := m.RecordRedaction(context.Background(), b); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if n := len(audit.Entries()); n != 1 {
		t.Errorf("%d entries after refused reports, want 1", n)
	}
}

func TestRecordRedactionFailsClosedWithoutAudit(t *testing.T) {
	m := NewManager(&MemoryBackend{}, failingAudit{})
	err := m.RecordRedaction(context.Background(), Redaction{
		Request: Request{Tenant: "t1", Host: "a.example.com"}, CredentialID: "c1", Where: "header", Count: 1,
	})
	if !errdefs.IsUnavailable(err) {
		t.Errorf("RecordRedaction with a failing audit log = %v, want ErrUnavailable", err)
	}
}
