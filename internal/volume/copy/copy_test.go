package copyvol

import (
	"testing"

	"github.com/spacesandbox/space/internal/volume"
	"github.com/spacesandbox/space/internal/volume/volumetest"
)

func TestConformance(t *testing.T) {
	volumetest.Run(t, func(t *testing.T) volume.Driver {
		d, err := New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
