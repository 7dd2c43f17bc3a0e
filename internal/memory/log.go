package memory

import (
	"context"
	"log/slog"
)

// warnOnly passes Warn and Error records to the wrapped handler and drops
// the rest: below LogBasic, the pools' Info lines are silenced but warnings
// still reach the user.
type warnOnly struct{ h slog.Handler }

func (w warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.h.Enabled(ctx, l)
}
func (w warnOnly) Handle(ctx context.Context, r slog.Record) error { return w.h.Handle(ctx, r) }
func (w warnOnly) WithAttrs(a []slog.Attr) slog.Handler            { return warnOnly{w.h.WithAttrs(a)} }
func (w warnOnly) WithGroup(n string) slog.Handler                 { return warnOnly{w.h.WithGroup(n)} }
