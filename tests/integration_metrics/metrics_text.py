"""A small reader of the Prometheus text exposition format (stdlib only)."""
import re

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Exposition(object):
    def __init__(self):
        self.types = {}    # family name -> "counter", "gauge", "histogram", ...
        self.samples = {}  # (sample name, frozenset of (label, value)) -> float

    def value(self, name, **labels):
        """The sample's value; 0 when absent."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def total(self, name, **labels):
        """Sum of every sample of `name` whose labels include `labels`."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)

    def names(self):
        """Every sample name (histograms with their _bucket/_sum/_count)."""
        return {n for n, _ in self.samples}


def parse(text):
    e = Exposition()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            e.types[name] = kind
        elif line and not line.startswith("#"):
            m = _SAMPLE.match(line)
            assert m, "not a sample line: %r" % line
            labels = frozenset(_LABEL.findall(m.group(2) or ""))
            e.samples[(m.group(1), labels)] = float(m.group(3))
    return e
