import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tock import SignatureError, sign, verify_signature  # noqa: E402
from tock._duration import format_duration, parse_duration  # noqa: E402

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "signatures.json")


class Vectors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(VECTORS, encoding="utf-8") as f:
            cls.v = json.load(f)

    def test_sign(self):
        for c in self.v["sign"]:
            with self.subTest(c["name"]):
                self.assertEqual(sign(c["secrets"], c["body"].encode(), c["t"]), c["header"])
                verify_signature(c["header"], c["body"].encode(), c["secrets"][-1], now=c["t"])

    def test_verify(self):
        self.assertGreater(len(self.v["verify"]), 20)
        for c in self.v["verify"]:
            with self.subTest(c["name"]):
                args = (c["header"], c["body"].encode("utf-8"), c["secrets"])
                kw = {"tolerance": c["tolerance_seconds"], "now": c["now"]}
                if c["error"] is None:
                    self.assertIsNone(verify_signature(*args, **kw))
                else:
                    with self.assertRaises(SignatureError) as cm:
                        verify_signature(*args, **kw)
                    self.assertEqual(cm.exception.kind, c["error"], str(cm.exception))

    def test_str_body_and_secret(self):
        h = sign("k", "héllo", 100)
        verify_signature(h, "héllo".encode(), b"k", now=100)
        verify_signature(h, "héllo", "k", now=100)

    def test_no_secret_and_default_tolerance(self):
        h = sign("k", b"x", 1000)
        with self.assertRaises(SignatureError) as cm:
            verify_signature(h, b"x", [], now=1000)
        self.assertEqual(cm.exception.kind, "no_secret")
        verify_signature(h, b"x", "k", now=1300, tolerance=None)
        with self.assertRaises(SignatureError):
            verify_signature(h, b"x", "k", now=1301, tolerance=None)
        with self.assertRaises(SignatureError) as cm:
            verify_signature(None, b"x", "k", now=1000)
        self.assertEqual(cm.exception.kind, "malformed")


class Durations(unittest.TestCase):
    def test_parse(self):
        for s, want in [("30s", 30), ("1m30s", 90), ("1h0m0s", 3600), ("250ms", 0.25), ("1.5s", 1.5), ("0s", 0),
                        ("0", 0), ("30m0s", 1800), ("2µs", 2e-6)]:
            self.assertAlmostEqual(parse_duration(s), want, msg=s)
        for bad in ["", "s", "1x", "1.s.", "abc"]:
            if bad == "":
                self.assertIsNone(parse_duration(bad))
                continue
            with self.assertRaises(ValueError, msg=bad):
                parse_duration(bad)

    def test_format(self):
        self.assertEqual(format_duration(30), "30s")
        self.assertEqual(format_duration(1.5), "1500ms")
        self.assertEqual(format_duration("1h"), "1h")
        self.assertIsNone(format_duration(None))


if __name__ == "__main__":
    unittest.main()
