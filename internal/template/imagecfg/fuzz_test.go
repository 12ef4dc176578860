package imagecfg

import (
	"reflect"
	"testing"
)

// FuzzParse: Parse never panics, what it accepts is valid and survives a
// Marshal/Parse round trip unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, `[]`, `{"User":"app:staff","Env":["A=1"],"WorkingDir":"/srv","Entrypoint":["/bin/x"],"Cmd":["-p","80"],"ExposedPorts":{"80/tcp":{}},"Labels":{"k":"v"}}`,
		`{"Env":["=x","A"]}`, `{"WorkingDir":"/a/../b"}`, `{"ExposedPorts":{"99999/tcp":{}}}`, `{"User":"4294967294:0"}`,
		`{"Cmd":null,"Entrypoint":[""]}`, `{"user":"root","User":"user"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted what Validate refuses: %v", err)
		}
		out, err := Marshal(c)
		if err != nil {
			t.Fatalf("Marshal of a parsed config: %v", err)
		}
		c2, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
		}
		if !reflect.DeepEqual(normal(c), normal(c2)) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", c, c2)
		}
	})
}

// normal makes empty and nil collections equal (omitempty drops both).
func normal(c Config) Config {
	if len(c.Env) == 0 {
		c.Env = nil
	}
	if len(c.Entrypoint) == 0 {
		c.Entrypoint = nil
	}
	if len(c.Cmd) == 0 {
		c.Cmd = nil
	}
	if len(c.ExposedPorts) == 0 {
		c.ExposedPorts = nil
	}
	if len(c.Labels) == 0 {
		c.Labels = nil
	}
	return c
}
