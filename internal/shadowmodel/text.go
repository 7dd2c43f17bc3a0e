package shadowmodel

// A script as text, one operation a line, parsed back into the identical
// Script (TestScriptsRoundTrip). The format of an operation comes from its
// struct's tags: `arg:"_"` fields are positional (always written), the
// others key=value (omitempty ones left out when zero; a bool is its bare
// key when true, absent when false). Lines starting with # are comments.

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseError is a line Parse could not read.
type ParseError struct {
	Line int // 1-based; 0 for the script as a whole
	Text string
	Err  error
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("shadowmodel: script: %v", e.Err)
	}
	return fmt.Sprintf("shadowmodel: script line %d %q: %v", e.Line, e.Text, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// String returns the script as text: a comment, the seed, the
// configuration, the known defects, then one line per operation.
func (s *Script) String() string {
	var b strings.Builder
	b.WriteString("# gpumem shadow model script (internal/shadowmodel): one operation a line; replay:\n")
	b.WriteString("#   go test ./internal/shadowmodel -run TestReplay -script FILE\n")
	b.WriteString("seed" + formatArgs(reflect.ValueOf(seedLine{s.Seed, s.Steps})) + "\n")
	b.WriteString("config" + formatArgs(reflect.ValueOf(s.Config)) + "\n")
	if len(s.Known) > 0 {
		parts := make([]string, len(s.Known))
		for i, k := range s.Known {
			parts[i] = strconv.Itoa(k)
		}
		b.WriteString("known " + strings.Join(parts, ",") + "\n")
	}
	for _, op := range s.Ops {
		b.WriteString(op.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// seedLine is the script's "seed" line.
type seedLine struct {
	Seed  uint64 `arg:"_"`
	Steps int    `arg:"steps,omitempty"`
}

// Parse reads a script written by Script.String (or by hand). Every buffer
// or graph an operation names must have been made by an earlier operation
// of the same goroutine.
func Parse(text string) (*Script, error) {
	s := &Script{}
	haveConfig := false
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fail := func(err error) error { return &ParseError{Line: i + 1, Text: line, Err: err} }
		fields, err := splitFields(line)
		if err != nil {
			return nil, fail(err)
		}
		switch head, args := fields[0], fields[1:]; {
		case head == "seed":
			var sl seedLine
			if err := parseArgs(reflect.ValueOf(&sl).Elem(), args); err != nil {
				return nil, fail(err)
			}
			s.Seed, s.Steps = sl.Seed, sl.Steps
		case head == "config":
			if err := parseArgs(reflect.ValueOf(&s.Config).Elem(), args); err != nil {
				return nil, fail(err)
			}
			if err := s.Config.validate(); err != nil {
				return nil, fail(err)
			}
			haveConfig = true
		case head == "known":
			if len(args) != 1 {
				return nil, fail(errors.New("want known n,m,…"))
			}
			for _, f := range strings.Split(args[0], ",") {
				n, err := strconv.Atoi(f)
				if err != nil {
					return nil, fail(err)
				}
				s.Known = append(s.Known, n)
			}
		case strings.HasPrefix(head, "w"):
			if !haveConfig {
				return nil, fail(errors.New("an operation before the config line"))
			}
			op, err := parseOp(head, args, s.Config.Workers)
			if err != nil {
				return nil, fail(err)
			}
			s.Ops = append(s.Ops, op)
		default:
			return nil, fail(fmt.Errorf("unknown line %q: want seed, config, known or w<n> <operation>", head))
		}
	}
	if !haveConfig {
		return nil, &ParseError{Err: errors.New("no config line")}
	}
	if err := checkNames(s); err != nil {
		return nil, &ParseError{Err: err}
	}
	return s, nil
}

func parseOp(head string, args []string, workers int) (Op, error) {
	w, err := strconv.Atoi(head[1:])
	if err != nil || w < 0 || w >= workers {
		return Op{}, fmt.Errorf("goroutine %q: want w0 to w%d", head, workers-1)
	}
	if len(args) == 0 {
		return Op{}, errors.New("no operation")
	}
	for _, a := range actions {
		if a.name() != args[0] {
			continue
		}
		v := reflect.New(reflect.TypeOf(a)).Elem()
		if err := parseArgs(v, args[1:]); err != nil {
			return Op{}, fmt.Errorf("%s: %w", args[0], err)
		}
		return Op{Worker: w, act: v.Interface().(action)}, nil
	}
	return Op{}, fmt.Errorf("unknown operation %q", args[0])
}

// checkNames checks the streams operations name, and that every buffer and graph an operation names was
// made earlier by its goroutine (a typo would otherwise make the
// operation a silent no-op), and made once.
func checkNames(s *Script) error {
	type key struct {
		w    int
		name string
	}
	made := map[key]bool{}
	for i, op := range s.Ops {
		if err := checkStreams(op.act, s.Config.Streams); err != nil {
			return fmt.Errorf("op %d (%s): %w", i, op, err)
		}
		var makes, names []string
		switch a := op.act.(type) {
		case allocOp:
			if a.A.Clone != 0 {
				return fmt.Errorf("op %d (%s): alloc names a clone", i, op)
			}
			makes = append(makes, a.A.String())
		case cloneOp:
			if a.To.Alloc != a.From.Alloc || a.To.Clone == 0 {
				return fmt.Errorf("op %d (%s): a clone is named after its allocation: %s.<n>", i, op, Ref{Alloc: a.From.Alloc})
			}
			makes, names = append(makes, a.To.String()), append(names, a.From.String())
		case captureOp:
			g, _ := a.G.MarshalText()
			makes, names = append(makes, string(g)), append(names, a.A.String(), a.B.String(), a.C.String())
		default:
			names = namesIn(reflect.ValueOf(op.act))
		}
		for _, n := range names {
			if !made[key{op.Worker, n}] {
				return fmt.Errorf("op %d (%s): goroutine %d made no %s before", i, op, op.Worker, n)
			}
		}
		for _, m := range makes {
			if made[key{op.Worker, m}] {
				return fmt.Errorf("op %d (%s): goroutine %d made %s before", i, op, op.Worker, m)
			}
			made[key{op.Worker, m}] = true
		}
	}
	return nil
}

// checkStreams checks an operation's stream (its "s" argument) and fault
// storage numbers.
func checkStreams(a action, streams int) error {
	v := reflect.ValueOf(a)
	for i := range v.NumField() {
		tag, _ := tagOf(v.Type().Field(i))
		switch n := v.Field(i); {
		case tag.key == "s" && (n.Int() < 0 || n.Int() >= int64(streams)):
			return fmt.Errorf("stream %d: the config has streams 0 to %d", n.Int(), streams-1)
		case tag.key == "storage" && n.Int() < 0:
			return fmt.Errorf("storage %d: want 0 or more", n.Int())
		}
	}
	return nil
}

// namesIn lists the buffers and graphs an operation's fields name.
func namesIn(v reflect.Value) []string {
	var out []string
	for i := range v.NumField() {
		switch f := v.Field(i).Interface().(type) {
		case Ref:
			if f != (Ref{}) {
				out = append(out, f.String())
			}
		case GraphID:
			g, _ := f.MarshalText()
			out = append(out, string(g))
		case uses:
			for _, u := range f {
				out = append(out, u.Ref.String())
			}
		}
	}
	return out
}

// argTag is a field's `arg` tag: its key ("_": positional), omitempty.
type argTag struct {
	key       string
	omitempty bool
}

func tagOf(f reflect.StructField) (argTag, bool) {
	t, ok := f.Tag.Lookup("arg")
	if !ok {
		return argTag{}, false
	}
	key, opt, _ := strings.Cut(t, ",")
	return argTag{key: key, omitempty: opt == "omitempty"}, true
}

// formatAction writes an action's name and arguments.
func formatAction(a action) string { return a.name() + formatArgs(reflect.ValueOf(a)) }

// formatArgs writes the tagged fields of struct v, each after a space:
// the positional ones first, in order, then the keyed ones.
func formatArgs(v reflect.Value) string {
	var pos, keyed []string
	for i := range v.NumField() {
		tag, ok := tagOf(v.Type().Field(i))
		f := v.Field(i)
		switch {
		case !ok:
		case tag.key == "_":
			pos = append(pos, formatValue(f))
		case f.Kind() == reflect.Bool:
			if f.Bool() {
				keyed = append(keyed, tag.key)
			}
		case tag.omitempty && f.IsZero():
		default:
			keyed = append(keyed, tag.key+"="+formatValue(f))
		}
	}
	var b strings.Builder
	for _, s := range append(pos, keyed...) {
		b.WriteString(" " + s)
	}
	return b.String()
}

var durationType = reflect.TypeFor[time.Duration]()

func formatValue(v reflect.Value) string {
	if v.Type() == durationType {
		d := time.Duration(v.Int())
		if d%time.Microsecond == 0 {
			return fmt.Sprintf("%dus", d/time.Microsecond)
		}
		return d.String()
	}
	if m, ok := v.Interface().(encoding.TextMarshaler); ok {
		t, _ := m.MarshalText()
		return string(t)
	}
	switch v.Kind() {
	case reflect.Int:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.String:
		return strconv.Quote(v.String())
	}
	panic(fmt.Sprintf("shadowmodel: no text form for %s", v.Type())) // a new field type: extend formatValue and parseValue
}

// parseArgs sets the tagged fields of the struct v points into from args.
func parseArgs(v reflect.Value, args []string) error {
	var posFields []int
	keyed := map[string]int{}
	for i := range v.NumField() {
		tag, ok := tagOf(v.Type().Field(i))
		switch {
		case !ok:
		case tag.key == "_":
			posFields = append(posFields, i)
		default:
			keyed[tag.key] = i
		}
	}
	if len(args) < len(posFields) {
		return fmt.Errorf("%d arguments, want %d before the key=value ones", len(args), len(posFields))
	}
	for k, i := range posFields {
		if err := parseValue(v.Field(i), args[k]); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, a := range args[len(posFields):] {
		key, val, hasVal := strings.Cut(a, "=")
		i, ok := keyed[key]
		switch {
		case !ok:
			return fmt.Errorf("unknown argument %q", key)
		case seen[key]:
			return fmt.Errorf("argument %q twice", key)
		case v.Field(i).Kind() == reflect.Bool:
			if hasVal {
				return fmt.Errorf("%s is a flag: write it bare", key)
			}
			v.Field(i).SetBool(true)
		case !hasVal:
			return fmt.Errorf("argument %q: want %s=value", key, key)
		default:
			if err := parseValue(v.Field(i), val); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		}
		seen[key] = true
	}
	return nil
}

func parseValue(v reflect.Value, s string) error {
	if v.Type() == durationType {
		d, err := time.ParseDuration(s)
		v.SetInt(int64(d))
		return err
	}
	if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(s))
	}
	switch v.Kind() {
	case reflect.Int:
		n, err := strconv.Atoi(s)
		v.SetInt(int64(n))
		return err
	case reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, 64)
		v.SetUint(n)
		return err
	case reflect.String:
		q, err := strconv.Unquote(s)
		v.SetString(q)
		return err
	}
	return fmt.Errorf("no text form for %s", v.Type())
}

// splitFields splits a line at spaces, keeping a quoted value (key="a b")
// in one field.
func splitFields(line string) ([]string, error) {
	var out []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		end := strings.IndexByte(line, ' ')
		if q := strings.IndexByte(line, '"'); q >= 0 && (end < 0 || q < end) {
			quoted, err := strconv.QuotedPrefix(line[q:])
			if err != nil {
				return nil, fmt.Errorf("unterminated quote: %w", err)
			}
			end = q + len(quoted)
			if end < len(line) && line[end] != ' ' {
				return nil, errors.New("a quoted value must end its field")
			}
		}
		if end < 0 {
			end = len(line)
		}
		out = append(out, line[:end])
		line = line[end:]
	}
	if len(out) == 0 {
		return nil, errors.New("empty line")
	}
	return out, nil
}

func marshalEnum(names []string, v int) ([]byte, error) {
	if v < 0 || v >= len(names) || names[v] == "" {
		return nil, fmt.Errorf("no name for value %d", v)
	}
	return []byte(names[v]), nil
}

func unmarshalEnum(names []string, v *int, t []byte) error {
	i := slices.Index(names, string(t))
	if i < 0 || string(t) == "" {
		return fmt.Errorf("%q: want one of %s", t, strings.Join(slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s == "" }), ", "))
	}
	*v = i
	return nil
}
