package memory_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/storage"
)

// Scenario 46.
func TestInvalidConfigIsRejectedNamingTheField(t *testing.T) {
	ok := memory.Properties{MaxPageSize: gib, Alignment: 32}
	for _, tc := range []struct {
		name  string
		p     memory.Properties
		c     memory.Config
		field string
	}{
		{"alignment 0", memory.Properties{MaxPageSize: gib}, memory.Config{}, "Alignment"},
		{"max page below alignment", memory.Properties{MaxPageSize: 16, Alignment: 32}, memory.Config{}, "MaxPageSize"},
		{"unknown dynamic kind", ok, memory.Config{Dynamic: 7}, "Dynamic"},
		{"unknown persistent memory", ok, memory.Config{Persistent: 9}, "Persistent"},
		{"unknown log level", ok, memory.Config{LogLevel: 9}, "LogLevel"},
		{"exclusive pages with a 16 KiB max page", memory.Properties{MaxPageSize: 16 * kib, Alignment: 32}, memory.Config{Dynamic: memory.ExclusivePages}, "Dynamic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate(tc.p)
			wantErrIs(t, err, memory.ErrInvalidConfig)
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name %s", err, tc.field)
			}
			m, err := memory.New(hoststorage.NewSim(32, nil), tc.p, tc.c, nil, "s0", nil)
			if m != nil || !errors.Is(err, memory.ErrInvalidConfig) {
				t.Fatalf("New = %v, %v; want ErrInvalidConfig", m, err)
			}
		})
	}
}

func TestValidConfigsPass(t *testing.T) {
	for _, tc := range []struct {
		p memory.Properties
		c memory.Config
	}{
		{adaptivePreset(0), memory.Config{}},
		{props128(), memory.Config{Dynamic: memory.ExclusivePages, Persistent: memory.Enforced, LogLevel: memory.LogFull}},
		{memory.Properties{MaxPageSize: 32 * kib, Alignment: 32}, memory.Config{Dynamic: memory.ExclusivePages}},
		{memory.Properties{MaxPageSize: 32, Alignment: 32}, memory.Config{}},
	} {
		if err := tc.c.Validate(tc.p); err != nil {
			t.Errorf("Validate(%+v, %+v) = %v, want nil", tc.p, tc.c, err)
		}
	}
}

func TestParsePersistentMemory(t *testing.T) {
	for s, want := range map[string]memory.PersistentMemory{
		"enabled": memory.Enabled, "size-match": memory.SizeMatch, "disabled": memory.Disabled, "enforced": memory.Enforced,
	} {
		got, err := memory.ParsePersistentMemory(s)
		if err != nil || got != want {
			t.Errorf("ParsePersistentMemory(%q) = %v, %v; want %v", s, got, err, want)
		}
		if got.String() != s {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), s)
		}
	}
	_, err := memory.ParsePersistentMemory("sizematch")
	wantErrIs(t, err, memory.ErrInvalidConfig)
	for _, allowed := range []string{"enabled", "size-match", "disabled", "enforced"} {
		if !strings.Contains(err.Error(), allowed) {
			t.Errorf("error %q does not list %q", err, allowed)
		}
	}
}

func TestParseDynamicKindListsAllowedSpellings(t *testing.T) {
	if k, err := memory.ParseDynamicKind("exclusive-pages"); err != nil || k != memory.ExclusivePages {
		t.Fatalf("ParseDynamicKind(exclusive-pages) = %v, %v", k, err)
	}
	_, err := memory.ParseDynamicKind("arena")
	wantErrIs(t, err, memory.ErrInvalidConfig)
	if !strings.Contains(err.Error(), "adaptive") || !strings.Contains(err.Error(), "exclusive-pages") {
		t.Fatalf("error %q does not list the allowed spellings", err)
	}
}

func TestMaySucceedAfterReclaimOnlyForOutOfMemoryAndExhaustedPageSizes(t *testing.T) {
	poisoned := fmt.Errorf("launch: %w", storage.ErrDevicePoisoned)
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"out of memory", storage.ErrOutOfMemory, true},
		{"out of memory, wrapped", fmt.Errorf("reserve 10 MiB: %w", storage.ErrOutOfMemory), true},
		{"typed out of memory", &storage.OutOfMemoryError{Requested: 1, Capacity: 1}, true},
		{"page sizes exhausted", pool.ErrPageSizesExhausted, true},
		{"page sizes exhausted, wrapped", fmt.Errorf("grow: %w", pool.ErrPageSizesExhausted), true},
		{"buffer too big", pool.ErrBufferTooBig, false},
		{"page update forbidden", memory.ErrPageUpdateForbidden, false},
		{"index overflow", handle.ErrIndexOverflow, false},
		{"poisoned", poisoned, false},
		{"out of memory on a poisoned device", fmt.Errorf("%w: %w", storage.ErrOutOfMemory, storage.ErrDevicePoisoned), false},
		{"exhausted on a poisoned device", errors.Join(pool.ErrPageSizesExhausted, poisoned), false},
		{"nil", nil, false},
	} {
		if got := memory.MaySucceedAfterReclaim(tc.err); got != tc.want {
			t.Errorf("%s: MaySucceedAfterReclaim(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// A storage refusal surfaces as a retryable ErrOutOfMemory and changes
// nothing (design §5.5, M2).
func TestRefusedPageIsRetryableOutOfMemoryAndChangesNothing(t *testing.T) {
	m := newManagerOn(t, hoststorage.NewSim(32, storage.NewBudget(8*mib)), memory.Properties{MaxPageSize: 16 * mib, Alignment: 32}, memory.Config{})
	first := alloc(t, m, 1*mib, memory.Allow)
	defer first.Release()
	before := m.Report()
	_, err := tryAlloc(m, 10*mib, memory.Allow)
	wantErrIs(t, err, storage.ErrOutOfMemory)
	if !memory.MaySucceedAfterReclaim(err) {
		t.Fatalf("MaySucceedAfterReclaim(%v) = false", err)
	}
	a := arena(t, m)
	if a.PageSize() != 2*mib || m.HasOutdated() || m.Report().Usage() != before.Usage() {
		t.Fatalf("refused growth changed the arena: page size %d, outdated %v", a.PageSize(), m.HasOutdated())
	}
	next := alloc(t, m, 1*mib, memory.Allow)
	defer next.Release()
	if !samePage(first.Location(), next.Location()) {
		t.Fatalf("next 1 MiB at %v, want the existing page %v", next.Location(), first.Location())
	}
}
