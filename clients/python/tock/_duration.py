import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def parse_duration(s):
    """Seconds in a Go duration string ("30s", "1m30s", "1.5h", "250ms")."""
    if s in (None, ""):
        return None
    s = str(s)
    sign = -1.0 if s.startswith("-") else 1.0
    rest = s.lstrip("+-")
    if rest == "0":
        return 0.0
    total, pos = 0.0, 0
    while pos < len(rest):
        m = _PART.match(rest, pos)
        if not m or m.group(1) in ("", "."):
            raise ValueError("invalid duration %r" % s)
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise ValueError("invalid duration %r" % s)
    return sign * total


def format_duration(v):
    """A Go duration string for seconds (int or float), or v itself when it is a str."""
    if v is None or isinstance(v, str):
        return v
    ms = round(float(v) * 1000)
    if ms % 1000 == 0:
        return "%ds" % (ms // 1000)
    return "%dms" % ms
