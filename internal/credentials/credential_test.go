package credentials

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestCredentialValidate(t *testing.T) {
	ok := cred("c1", Scope{Tenant: "t1"}, "a.example.com")
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid credential: %v", err)
	}
	tests := map[string]func(c *Credential){
		"empty id":            func(c *Credential) { c.ID = "" },
		"slash in id":         func(c *Credential) { c.ID = "a/b" },
		"no tenant":           func(c *Credential) { c.Scope.Tenant = "" },
		"bad project":         func(c *Credential) { c.Scope.Project = "p 1" },
		"empty name":          func(c *Credential) { c.Name = "" },
		"empty secret":        func(c *Credential) { c.Secret = nil },
		"1-byte secret":       func(c *Credential) { c.Secret = []byte("Q") },
		"short secret":        func(c *Credential) { c.Secret = []byte("1234567") },
		"huge secret":         func(c *Credential) { c.Secret = make([]byte, MaxSecretLen+1) },
		"CRLF in header":      func(c *Credential) { c.Secret = []byte("tok\r\nX-Evil: 1") },
		"bad header name":     func(c *Credential) { c.Injection.Name = "X Token" },
		"framing header":      func(c *Credential) { c.Injection.Name = "content-length" },
		"host header":         func(c *Credential) { c.Injection.Name = "Host" },
		"unknown method":      func(c *Credential) { c.Injection.Method = "cookie" },
		"basic without colon": func(c *Credential) { c.Injection = Injection{Method: MethodBasic}; c.Secret = []byte("tokenvalue42") },
		"basic with name":     func(c *Credential) { c.Injection = Injection{Method: MethodBasic, Name: "x"}; c.Secret = []byte("u:p") },
		"query without name":  func(c *Credential) { c.Injection = Injection{Method: MethodQuery} },
		"no hosts":            func(c *Credential) { c.AllowedHosts = nil },
		"bad host":            func(c *Credential) { c.AllowedHosts = []string{"*"} },
		"too many hosts":      func(c *Credential) { c.AllowedHosts = make([]string, MaxAllowedHosts+1) },
		"negative rate":       func(c *Credential) { c.RateLimit = -1 },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			c := ok.Clone()
			mutate(&c)
			err := c.Validate()
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("Validate = %v, want ErrInvalidArgument", err)
			}
			if len(c.Secret) > 0 && strings.Contains(err.Error(), string(c.Secret)) {
				t.Errorf("error quotes the secret: %v", err)
			}
		})
	}
	for _, inj := range []Injection{{Method: MethodBasic}, {Method: MethodQuery, Name: "api_key"}} {
		c := ok.Clone()
		c.Injection = inj
		c.Secret = []byte("user:pa\nss") // control bytes are fine in a query (escaped)
		if inj.Method == MethodBasic {
			c.Secret = []byte("user:pass")
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s injection: %v", inj.Method, err)
		}
	}
}

func TestMemoryBackend(t *testing.T) {
	ctx := context.Background()
	b := &MemoryBackend{}
	c := cred("c1", Scope{Tenant: "t1", Project: "p1"}, "a.example.com")
	if err := b.Put(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Secret[0] = 'X' // the backend holds its own copy
	got, err := b.Get(ctx, "c1")
	if err != nil || string(got.Secret) != "s3cret-c1" {
		t.Fatalf("Get = %v %q, %v", got, got.Secret, err)
	}
	moved := cred("c1", Scope{Tenant: "t1"}, "a.example.com")
	if err := b.Put(ctx, moved); !errdefs.IsConflict(err) {
		t.Errorf("Put into another scope: %v, want ErrConflict", err)
	}
	if l, _ := b.List(ctx, Scope{Tenant: "t1"}); len(l) != 0 {
		t.Errorf("tenant scope lists %d, want only exact-scope credentials (0)", len(l))
	}
	if l, _ := b.List(ctx, Scope{Tenant: "t1", Project: "p1"}); len(l) != 1 {
		t.Errorf("project scope lists %d, want 1", len(l))
	}
	if err := b.Delete(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "c1"); !errdefs.IsNotFound(err) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := b.Delete(ctx, "c1"); !errdefs.IsNotFound(err) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if err := b.Put(ctx, Credential{ID: "bad"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Put of an invalid credential: %v", err)
	}
}

func TestHeadersInjectionValidate(t *testing.T) {
	ok := cred("c1", Scope{Tenant: "t1"}, "a.example.com")
	ok.Injection = Injection{Method: MethodHeaders, Name: "X-Key,X-Org"}
	ok.Secret = []byte("key-value-1\norg-value-2")
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid headers credential: %v", err)
	}
	names, values, err := ok.InjectedHeaders()
	if err != nil || strings.Join(names, "|") != "X-Key|X-Org" || string(values[0]) != "key-value-1" || string(values[1]) != "org-value-2" {
		t.Fatalf("InjectedHeaders = %q, %q, %v", names, values, err)
	}
	tests := map[string]func(c *Credential){
		"one header":      func(c *Credential) { c.Injection.Name = "X-Key"; c.Secret = []byte("key-value-1") },
		"more names":      func(c *Credential) { c.Injection.Name = "X-Key,X-Org,X-Third" },
		"more values":     func(c *Credential) { c.Secret = []byte("key-value-1\norg-value-2\nthird-value") },
		"empty name":      func(c *Credential) { c.Injection.Name = "X-Key," },
		"bad name":        func(c *Credential) { c.Injection.Name = "X-Key,X Org" },
		"framing header":  func(c *Credential) { c.Injection.Name = "X-Key,Transfer-Encoding" },
		"same name twice": func(c *Credential) { c.Injection.Name = "X-Key,x-key" },
		"short value":     func(c *Credential) { c.Secret = []byte("key-value-1\nq7z") },
		"CR in a value":   func(c *Credential) { c.Secret = []byte("key-value-1\rX: y\norg-value-2") },
		"too many": func(c *Credential) {
			var names, values []string
			for i := range MaxInjectedHeaders + 1 {
				names, values = append(names, fmt.Sprintf("X-H%d", i)), append(values, fmt.Sprintf("value-%04d", i))
			}
			c.Injection.Name, c.Secret = strings.Join(names, ","), []byte(strings.Join(values, "\n"))
		},
		"headers of no names": func(c *Credential) { c.Injection.Name = "" },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			c := ok.Clone()
			mutate(&c)
			err := c.Validate()
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("Validate = %v, want ErrInvalidArgument", err)
			}
			for _, v := range strings.Split(string(c.Secret), "\n") {
				if strings.Contains(err.Error(), v) {
					t.Errorf("error quotes a value: %v", err)
				}
			}
		})
	}
}
