package shadowmodel

// The generator's misuse and injected faults (generate.go has the mix).

// misuse draws a wrong call: an allocation above the max page, a use
// outside its buffer, or a call on a freed handle.
func (w *genWorker) misuse() {
	g := w.g
	switch w.r.IntN(6) {
	case 0:
		size := g.cfg.MaxPage + 1 + w.r.Uint64N(g.cfg.MaxPage)
		w.emit(tooBigOp{S: w.r.IntN(w.streams()), Size: size})
	case 1:
		a := w.pickAlloc(known)
		if a == nil {
			return
		}
		o := w.pickAlloc(known)
		op := outsideOp{S: w.r.IntN(w.streams()), In: a.ref(w.r), N: 1 + w.r.Uint64N(8)}
		if o != nil && o != a {
			op.Out = o.ref(w.r)
		}
		w.emit(op)
	default:
		if len(w.stale) == 0 {
			return
		}
		st := w.stale[w.r.IntN(len(w.stale))]
		op := staleOp{Ref: st.ref, Call: staleCall(w.r.IntN(5))}
		switch op.Call {
		case staleWrite:
			// Nothing, too much, or a fitting prefix: the freed buffer
			// says so first, whatever the length (defect 10).
			switch w.r.IntN(3) {
			case 0:
				op.N = st.size + 1 + w.r.Uint64N(64)
			case 1:
				op.N = min(st.size, 1+w.r.Uint64N(64))
			}
			if g.known[10] && (op.N == 0 || op.N > st.size) {
				if op.N = min(st.size, 1); op.N == 0 {
					return
				}
			}
		case staleEnqueue:
			op.S = w.r.IntN(w.streams())
		}
		w.emit(op)
	}
}

// injectFault arms one storage fault on a random stream's storage.
func (w *genWorker) injectFault() {
	op := faultOp{Storage: w.r.IntN(w.streams())}
	switch x := w.r.IntN(20); {
	case x < 6:
		op.Kind, op.N = refuseAllocs, 1+w.r.IntN(2)
	case x < 10 && w.g.cfg.Granular:
		op.Kind, op.N = refuseMaps, 1+w.r.IntN(2)
	case x < 14:
		op.Kind, op.N = refuseCopy, 1+w.r.IntN(3)
	case x < 16:
		op.Kind, op.Above = refuseAbove, w.r.Uint64N(8<<20)
	case x < 18:
		op.Kind = thresholdOff
	default:
		// A refused wait may leak a relocation's source and target for
		// good (design §7.5): rare, or the capacity fills with leaks.
		if w.g.waitFaults >= 2 {
			return
		}
		w.g.waitFaults++
		op.Kind, op.N = refuseWait, 1+w.r.IntN(2)
	}
	w.emit(op)
}
