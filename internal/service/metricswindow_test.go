package service

import "testing"

func TestMetricsWindow(t *testing.T) {
	for _, tt := range []struct {
		start, end string
		ok         bool
	}{
		{"", "", true}, {"100", "", true}, {"", "100", true}, {"100", "100", true}, {"100", "200", true},
		{"200", "100", false}, {"soon", "", false}, {"", "-1", false}, {"", "1e3", false}, {"", "99999999999999", false},
	} {
		_, _, err := MetricsWindow(tt.start, tt.end)
		if (err == nil) != tt.ok {
			t.Errorf("MetricsWindow(%q, %q): %v, want ok %v", tt.start, tt.end, err, tt.ok)
		}
	}
}
