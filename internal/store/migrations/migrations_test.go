package migrations

import "testing"

func TestAll(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 || all[0].Version != 1 || all[0].SQL == "" {
		t.Fatalf("All() = %d migrations, first %+v", len(all), all[0])
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int
		ok   bool
	}{
		{"0001_init.sql", 1, true},
		{"0012_add_x.sql", 12, true},
		{"1_init.sql", 0, false},
		{"0000_zero.sql", 0, false},
		{"00a1_x.sql", 0, false},
		{"0001init.sql", 0, false},
		{"0001_init.txt", 0, false},
	} {
		m, err := parse(tc.name)
		if (err == nil) != tc.ok || (tc.ok && m.Version != tc.want) {
			t.Errorf("parse(%q) = %+v, %v; want version %d ok %v", tc.name, m, err, tc.want, tc.ok)
		}
	}
}
