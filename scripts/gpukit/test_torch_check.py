"""Tests of torch-check.py's logic that needs no GPU, and no torch: reading
`gpumem advise -json`, the caps and fractions, the search for the real
threshold, the verdicts and the table; on the shared snapshots where they
are (GPUMEM_TRACES, default /work/shared/traces) and a gpumem binary is
given (GPUMEM_BIN), else those tests skip with a message.

    GPUMEM_BIN=KIT/bin/gpumem python3 -m unittest -v scripts/gpukit/test_torch_check.py

With torch importable (a CPU build is enough) the workloads also run once
each, small, on the CPU, through the worker's own code.
"""

import importlib.util
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.environ.get("TORCH_CHECK", os.path.join(HERE, "..", "torch-check.py"))


def load():
    spec = importlib.util.spec_from_file_location("torch_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tc = load()
MiB = 1 << 20
TRACES = os.environ.get("GPUMEM_TRACES", "/work/shared/traces")
GPUMEM = os.environ.get("GPUMEM_BIN", "")


class ImportsWithoutTorch(unittest.TestCase):
    def test_loading_the_script_imports_no_torch(self):
        # A fresh interpreter, so other tests' imports do not count.
        code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('t', %r); "
                "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
                "print('torch' in sys.modules)" % SCRIPT)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        self.assertEqual(out.strip(), "False")


class Fractions(unittest.TestCase):
    def test_the_fraction_allows_the_cap_and_not_one_unit_more(self):
        for total in (143771 * MiB, 150754820096, 80 * 1000 ** 3, 2 ** 34 + 12345):
            for cap in (2 * MiB, 126 * MiB, 19667091456, 55253663744, total // (2 * MiB) * 2 * MiB - 2 * MiB):
                if cap + MiB > total:
                    continue
                f = tc.cap_fraction(cap, total)
                allowed = tc.allowed_bytes(f, total)
                self.assertGreaterEqual(allowed, cap, (total, cap))
                self.assertLess(allowed, cap + 2 * MiB, (total, cap))

    def test_caps_that_are_not_whole_units_or_past_the_device_are_refused(self):
        with self.assertRaises(ValueError):
            tc.cap_fraction(3 * MiB, 1 << 34)
        with self.assertRaises(ValueError):
            tc.cap_fraction(0, 1 << 34)
        with self.assertRaises(ValueError):
            tc.cap_fraction(1 << 35, 1 << 34)

    def test_planned_caps(self):
        c = tc.planned_caps(1000 * MiB)
        self.assertEqual(c["at"], 1000 * MiB)
        self.assertEqual(c["tight"], 998 * MiB)
        self.assertEqual(c["below"], 970 * MiB)
        for v in c.values():
            self.assertEqual(v % (2 * MiB), 0)


def oracle(threshold):
    return lambda cap: "complete" if cap >= threshold else "oom"


def run_search(predicted, threshold, limit=None):
    """Runs the check's probes against a workload that completes at and
    above threshold, as run_case does."""
    s = tc.Search(predicted, limit or predicted * 8)
    ask = oracle(threshold)
    for cap in tc.planned_caps(predicted).values():
        s.record(cap, ask(cap))
    while True:
        cap = s.next_cap()
        if cap is None:
            break
        s.record(cap, ask(cap))
    return tc.judge(predicted, s.results, s), s


class SearchAndVerdicts(unittest.TestCase):
    def test_an_exact_prediction(self):
        v, s = run_search(1000 * MiB, 1000 * MiB)
        self.assertEqual(v["verdict"], "exact")
        self.assertEqual((v["observed_lo"], v["observed_hi"]), (998 * MiB, 1000 * MiB))
        self.assertEqual(len(s.results), 3, "an exact prediction needs no search")
        self.assertEqual(tc.fmt_off(v), "0")

    def test_a_prediction_that_holds_within_the_margin(self):
        # Completes from 980 MiB: out at 970 MiB, in at 998 MiB and 1000 MiB.
        v, s = run_search(1000 * MiB, 980 * MiB)
        self.assertEqual(v["verdict"], "holds")
        lo, hi = v["observed_lo"], v["observed_hi"]
        self.assertLess(lo, 980 * MiB)
        self.assertGreaterEqual(hi, 980 * MiB)
        self.assertLessEqual(hi - lo, s.tol)
        self.assertIn("-", tc.fmt_off(v))

    def test_too_low_a_prediction_is_found_and_measured(self):
        # PyTorch needs 1200 MiB where gpumem said 1000 MiB.
        v, s = run_search(1000 * MiB, 1200 * MiB)
        self.assertEqual(v["verdict"], "differs")
        self.assertEqual(v["at"], "oom")
        lo, hi = v["observed_lo"], v["observed_hi"]
        self.assertLess(lo, 1200 * MiB)
        self.assertGreaterEqual(hi, 1200 * MiB)
        self.assertLessEqual(hi - lo, s.tol)
        self.assertGreater(v["off_by_max"], 0)
        self.assertLessEqual(len(s.results), tc.Search.MAX_PROBES)

    def test_too_high_a_prediction_is_found_and_measured(self):
        # PyTorch completes at 600 MiB where gpumem said 1000 MiB.
        v, s = run_search(1000 * MiB, 600 * MiB)
        self.assertEqual(v["verdict"], "differs")
        self.assertEqual(v["below"], "complete")
        lo, hi = v["observed_lo"], v["observed_hi"]
        self.assertLess(lo, 600 * MiB)
        self.assertGreaterEqual(hi, 600 * MiB)
        self.assertLess(v["off_by_max"], 0)

    def test_a_workload_that_never_fits_stops_at_the_limit(self):
        v, s = run_search(1000 * MiB, 1 << 50, limit=3000 * MiB)
        self.assertEqual(v["verdict"], "differs")
        self.assertIsNone(v["observed_hi"])
        self.assertTrue(all(c <= 3000 * MiB for c in s.results))
        self.assertTrue(tc.fmt_off(v).startswith(">"))

    def test_an_error_ends_the_search_and_is_the_verdict(self):
        s = tc.Search(1000 * MiB, 8000 * MiB)
        caps = tc.planned_caps(1000 * MiB)
        s.record(caps["at"], "error")
        s.record(caps["below"], "oom")
        self.assertIsNone(s.next_cap())
        self.assertEqual(tc.judge(1000 * MiB, s.results, s)["verdict"], "error")

    def test_probes_the_budget_skipped_leave_the_case_incomplete(self):
        caps = tc.planned_caps(1000 * MiB)
        v = tc.judge(1000 * MiB, {caps["at"]: "complete"})
        self.assertEqual(v["verdict"], "incomplete")

    def test_summary_fails_on_any_difference(self):
        ok = {"workload": "a", "setting": "defaults", "verdict": run_search(1000 * MiB, 1000 * MiB)[0]}
        bad = {"workload": "b", "setting": "expandable", "verdict": run_search(1000 * MiB, 1100 * MiB)[0]}
        figures, result = tc.summarize([ok])
        self.assertEqual(result, "pass")
        self.assertEqual(figures["verdict_exact"], 1)
        figures, result = tc.summarize([ok, bad])
        self.assertTrue(result.startswith("fail: 1 differs of 2 cases"), result)
        self.assertEqual(tc.summarize([])[1], "fail: no case ran")


@unittest.skipUnless(os.path.isdir(TRACES), "no shared snapshots at %s (GPUMEM_TRACES)" % TRACES)
@unittest.skipUnless(GPUMEM and os.access(GPUMEM, os.X_OK), "no gpumem binary (set GPUMEM_BIN)")
class OnTheSharedSnapshots(unittest.TestCase):
    """advise's real output on snapshots PyTorch recorded, through the
    script's reading, caps, verdicts and table."""

    SNAPSHOTS = ["unet-snapshot.pickle", "transformer-ctx128-forward.pickle"]

    @classmethod
    def setUpClass(cls):
        cls.advised = {}
        for name in cls.SNAPSHOTS:
            path = os.path.join(TRACES, name)
            if not os.path.exists(path):
                continue
            p = subprocess.run([GPUMEM, "advise", "-json", "-quiet", path], capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                raise AssertionError("gpumem advise %s: %s" % (name, p.stderr))
            cls.advised[name] = json.loads(p.stdout)

    def test_advise_output_reads(self):
        if not self.advised:
            self.skipTest("none of %s in %s" % (self.SNAPSHOTS, TRACES))
        for name, doc in self.advised.items():
            a = tc.read_advise(doc)
            self.assertEqual(a["trace"], name)
            self.assertGreater(a["events"], 0)
            self.assertGreater(a["peak_live"], 0)
            for setting, conf, policy in tc.SETTINGS:
                s = a["settings"][setting]
                self.assertEqual(s["policy"], policy)
                self.assertEqual(s["conf"], conf)
                self.assertEqual(s["min_capacity"] % (2 * MiB), 0, (name, setting))
                # The smallest capacity holds the peak live bytes and no
                # more than the unlimited run reserves.
                self.assertGreaterEqual(s["min_capacity"], a["peak_live"], (name, setting))
                self.assertLessEqual(s["min_capacity"], s["peak_reserved"], (name, setting))
                self.assertGreater(tc.cap_fraction(s["min_capacity"], 143771 * MiB), 0)

    def test_the_unet_figures(self):
        doc = self.advised.get("unet-snapshot.pickle")
        if doc is None:
            self.skipTest("unet-snapshot.pickle not in %s" % TRACES)
        a = tc.read_advise(doc)
        # What gpumem advise says of it (README: 126 MiB with the
        # defaults, 108 MiB with expandable segments).
        self.assertEqual(a["settings"]["defaults"]["min_capacity"], 132120576)
        self.assertEqual(a["settings"]["expandable"]["min_capacity"], 113246208)
        self.assertEqual(a["peak_live"], 108258676)

    def test_a_table_from_advise_and_simulated_runs(self):
        if not self.advised:
            self.skipTest("no snapshot advised")
        cases, recorded = [], []
        for i, (name, doc) in enumerate(sorted(self.advised.items())):
            a = tc.read_advise(doc)
            for setting, conf, _ in tc.SETTINGS:
                c = a["settings"][setting]["min_capacity"]
                # One exact, one off by 5%.
                v, _ = run_search(c, c if i == 0 else tc.round_down(int(c * 1.05)))
                cases.append({"workload": name, "setting": setting, "verdict": v})
            recorded.append({"workload": name, "events": a["events"], "peak_live": a["peak_live"],
                             "model_peak_defaults": a["settings"]["defaults"]["peak_reserved"],
                             "observed_peak_defaults": a["recorded_reserved"],
                             "model_peak_expandable": a["settings"]["expandable"]["peak_reserved"]})
        text = tc.table(cases, recorded)
        for name in self.advised:
            self.assertIn(name, text)
        self.assertIn("exact", text)
        if len(self.advised) > 1:
            self.assertIn("differs", text)
            self.assertIn("+", text)
        widths = {len(l) for l in text.splitlines()[2:2 + len(cases)]}
        self.assertTrue(widths, text)


def synthetic_advise(defaults, expandable, peak_live):
    """A minimal `gpumem advise -json` document."""
    return {"comparison": {"trace": "x.pickle", "events": 100, "peak_live_bytes": peak_live,
                           "recorded_reserved_bytes": defaults, "pytorch": {"reserved_at_trace_start_bytes": 0},
                           "policies": [
                               {"name": "adaptive", "min_capacity_bytes": peak_live, "peak_reserved_bytes": peak_live},
                               {"name": "torch:defaults", "min_capacity_bytes": defaults, "peak_reserved_bytes": defaults + 20 * MiB},
                               {"name": "torch:expandable_segments:True", "min_capacity_bytes": expandable,
                                "peak_reserved_bytes": expandable}]},
            "best_setting": "expandable_segments:True"}


class FakeTorch:
    """What the parent asks of torch: a CUDA device and its memory."""
    __version__ = "0.fake"

    class cuda:
        @staticmethod
        def is_available():
            return True

        @staticmethod
        def get_device_properties(i):
            class P:
                name = "Fake H200"
                total_memory = 143771 * MiB
            return P()


class ParentFlowSimulated(unittest.TestCase):
    """The parent's whole flow (record, advise, the cases and their search,
    the unlimited expandable runs, the table, the JSON and the result line)
    with the fresh processes and advise replaced by a simulation: each
    workload completes at and above a threshold of its own."""

    def run_parent(self, thresholds, predicted):
        import shutil
        import tempfile
        out = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, out, True)
        fake_gpumem = os.path.join(out, "gpumem")
        with open(fake_gpumem, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(fake_gpumem, 0o755)
        calls = []

        def probe(runner, workload, conf, cap=None, record=None):
            calls.append((workload, conf, cap, record))
            if record:
                open(record, "w").close()
                return {"workload": workload, "cap": None, "conf": conf, "outcome": "complete", "max_reserved": 777 * MiB}
            t = thresholds[(workload, conf)]
            if cap is None:
                return {"workload": workload, "cap": None, "conf": conf, "outcome": "complete", "max_reserved": t + 10 * MiB}
            return {"workload": workload, "cap": cap, "conf": conf, "outcome": "complete" if cap >= t else "oom"}

        def advise(gpumem, snapshot, out_json):
            w = os.path.basename(snapshot)[:-len(".pickle")]
            d, e = predicted[w]
            return tc.read_advise(synthetic_advise(d, e, min(d, e) - 50 * MiB))

        saved = (tc.Runner.probe, tc.advise, sys.modules.get("torch"))
        tc.Runner.probe, tc.advise = probe, advise
        sys.modules["torch"] = FakeTorch
        try:
            args = tc.argparse.Namespace(gpumem=fake_gpumem, out=out, budget=60, jobs=4, quick=True,
                                         workloads="cnn,generation", worker=None)
            with self.assertRaises(SystemExit) as ex:
                import contextlib
                import io
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf):
                    tc.main_parent(args)
        finally:
            tc.Runner.probe, tc.advise = saved[0], saved[1]
            if saved[2] is None:
                del sys.modules["torch"]
            else:
                sys.modules["torch"] = saved[2]
        with open(os.path.join(out, "torch-check.json")) as f:
            doc = json.load(f)
        with open(os.path.join(out, "torch-check.txt")) as f:
            text = f.read()
        return ex.exception.code, doc, text, buf.getvalue(), calls

    def test_all_predictions_exact_pass(self):
        pred = {"cnn": (1000 * MiB, 900 * MiB), "generation": (2000 * MiB, 1800 * MiB)}
        th = {("cnn", ""): 1000 * MiB, ("cnn", "expandable_segments:True"): 900 * MiB,
              ("generation", ""): 2000 * MiB, ("generation", "expandable_segments:True"): 1800 * MiB}
        code, doc, text, out, calls = self.run_parent(th, pred)
        self.assertEqual(code, 0, out)
        self.assertEqual(doc["result"], "pass")
        self.assertEqual([c["verdict"]["verdict"] for c in doc["cases"]], ["exact"] * 4)
        self.assertEqual([(c["workload"], c["setting"]) for c in doc["cases"]],
                         [("cnn", "defaults"), ("cnn", "expandable"), ("generation", "defaults"), ("generation", "expandable")])
        self.assertIn("result: pass", out)
        self.assertIn("figure: cnn_defaults_verdict exact", out)
        self.assertEqual(doc["recorded"][0]["observed_peak_defaults"], 777 * MiB)
        self.assertEqual(doc["recorded"][0]["observed_peak_expandable"], 910 * MiB)
        # Two recordings, three caps per case, one unlimited expandable run each.
        self.assertEqual(len(calls), 2 + 4 * 3 + 2)
        self.assertIn("Fake", doc["device"])

    def test_a_differing_prediction_fails_and_says_by_how_much(self):
        pred = {"cnn": (1000 * MiB, 900 * MiB), "generation": (2000 * MiB, 1800 * MiB)}
        th = {("cnn", ""): 1100 * MiB, ("cnn", "expandable_segments:True"): 900 * MiB,
              ("generation", ""): 2000 * MiB, ("generation", "expandable_segments:True"): 1800 * MiB}
        code, doc, text, out, calls = self.run_parent(th, pred)
        self.assertEqual(code, 1)
        self.assertTrue(doc["result"].startswith("fail: 1 differs of 4 cases"), doc["result"])
        bad = [c for c in doc["cases"] if c["verdict"]["verdict"] == "differs"]
        self.assertEqual((bad[0]["workload"], bad[0]["setting"]), ("cnn", "defaults"))
        v = bad[0]["verdict"]
        self.assertLess(v["observed_lo"], 1100 * MiB)
        self.assertGreaterEqual(v["observed_hi"], 1100 * MiB)
        self.assertIn("differs", text)
        self.assertIn("+", tc.fmt_off(v))


def have_torch():
    try:
        import torch  # noqa: F401
        return True
    except Exception:
        return False


@unittest.skipUnless(have_torch(), "torch is not importable here: the workloads are not tried on the CPU")
class WorkloadsOnTheCPU(unittest.TestCase):
    def test_each_workload_runs_in_a_worker(self):
        for name in tc.WORKLOADS:
            spec = json.dumps({"workload": name, "quick": True, "device": "cpu"})
            p = subprocess.run([sys.executable, SCRIPT, "--worker", spec], capture_output=True, text=True, timeout=300)
            lines = [l for l in p.stdout.splitlines() if l.startswith("TORCHCHECK-RESULT ")]
            self.assertTrue(lines, p.stdout + p.stderr)
            res = json.loads(lines[-1].split(" ", 1)[1])
            self.assertEqual(res["outcome"], "complete", res)


if __name__ == "__main__":
    unittest.main()
