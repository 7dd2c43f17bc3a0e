package gpumem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Stats print with names in slog, and a device's published expvar reads
// its current counters at every scrape.
func TestStatsAreNamedInSlogAndPublishedThroughExpvar(t *testing.T) {
	dev, err := Open(WithSim())
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ctx := context.Background()
	b, err := dev.DefaultStream().Alloc(ctx, 3<<20)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("memory", "stats", dev.Stats())
	for _, want := range []string{"stats.bytes_in_use=3145728", "stats.allocs=1", "stats.relocations_explicit=0"} {
		if !strings.Contains(logged.String(), want) {
			t.Fatalf("slog line %q lacks %s", logged.String(), want)
		}
	}
	name := "gpumem-test-" + t.Name()
	if err := dev.Publish(name); err != nil {
		t.Fatal(err)
	}
	if err := dev.Publish(name); !errors.Is(err, ErrPublished) {
		t.Fatalf("second Publish: %v, want ErrPublished", err)
	}
	if err := dev.Publish(""); !errors.Is(err, ErrInvalidName) || errors.Is(err, ErrPublished) || strings.Contains(err.Error(), "already published") {
		t.Fatalf("Publish(\"\"): %v, want ErrInvalidName, not ErrPublished", err)
	}
	read := func() map[string]uint64 {
		var m map[string]uint64
		if err := json.Unmarshal([]byte(expvar.Get(name).String()), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := read(); m["bytes_in_use"] != 3<<20 || m["allocs"] != 1 {
		t.Fatalf("published %v", m)
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	if m := read(); m["bytes_in_use"] != 0 {
		t.Fatalf("after the free: published %v", m)
	}
	// Racing publishers of one name: one wins, the others get
	// ErrPublished, none panics.
	var wg sync.WaitGroup
	var won int
	var mu sync.Mutex
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := dev.Publish(name + "-race"); err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			} else if !errors.Is(err, ErrPublished) {
				t.Errorf("Publish: %v", err)
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d publishers won", won)
	}
}

// Every metric has a distinct name and a Prometheus name; counters end in
// _total.
func TestMetricNamesAreDistinct(t *testing.T) {
	st := Stats{FailedReserves: map[string]uint64{"out_of_memory": 2}}
	seen := map[string]bool{}
	for _, m := range st.Metrics() {
		if seen[m.Name] || m.Prometheus == "" || m.Counter != strings.HasSuffix(m.Prometheus, "_total") {
			t.Fatalf("metric %+v", m)
		}
		seen[m.Name] = true
	}
	if !seen["failed_reserves_out_of_memory"] || !seen["relocations_memory_pressure"] {
		t.Fatalf("names %v", seen)
	}
}
