package gpumem

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// Open refuses a config or properties that cannot work, naming the public
// field: the values convert to the memory manager's as they are, so an
// unknown one stays unknown there and its validation says which.
func TestOpenRefusesAnUnknownMemoryConfigByItsPublicName(t *testing.T) {
	bad := Mode(9)
	for _, c := range []struct {
		opt  Option
		want string
	}{
		{WithMemoryConfig(MemoryConfig{Dynamic: 9}), "MemoryConfig.Dynamic"},
		{WithMemoryConfig(MemoryConfig{Persistent: 9}), "MemoryConfig.Persistent"},
		{WithMemoryConfig(MemoryConfig{BaseMode: &bad}), "MemoryConfig.BaseMode"},
		{WithProperties(Properties{MaxPageSize: 1 << 20}), "Properties.Alignment"},
	} {
		d, err := Open(WithSim(), c.opt)
		if err == nil {
			d.Close()
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open with a bad %s = %v, want ErrInvalidConfig naming it", c.want, err)
		}
	}
}

// MemoryConfig.Log says how much the pools tell the device's logger,
// whatever the logger would print: nothing below a warning unset, their
// layout at Info, every reservation's route at Debug.
func TestMemoryConfigLogChoosesWhatThePoolsSay(t *testing.T) {
	for _, c := range []struct {
		name        string
		log         slog.Leveler
		info, debug bool
	}{
		{"unset", nil, false, false},
		{"warn", slog.LevelWarn, false, false},
		{"info", slog.LevelInfo, true, false},
		{"debug", slog.LevelDebug, true, true},
	} {
		logs := &logRecords{}
		d := openHost(t, WithSim(), WithLogger(slog.New(logs)), WithMemoryConfig(MemoryConfig{Log: c.log}))
		b, err := d.DefaultStream().Alloc(context.Background(), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		mustFree(t, b)
		info := logs.count(slog.LevelInfo, "memory created") > 0
		debug := logs.count(slog.LevelDebug, "reservation") > 0
		if info != c.info || debug != c.debug {
			t.Errorf("Log %s: the pools' Info lines %v, Debug lines %v; want %v, %v", c.name, info, debug, c.info, c.debug)
		}
	}
}
