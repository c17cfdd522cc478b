"""Makes client-influenced text safe to return: valid UTF-8, no control
characters or ANSI escapes, host paths replaced by placeholders, bounded size."""
import os
import re

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
# Everything below 0x20 except \t and \n, DEL and the C1 range.
_CTRL = re.compile(u"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")


def to_text(data):
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return "" if data is None else str(data)


def clean(text):
    """Removes ANSI sequences and control characters; keeps \\n and \\t."""
    text = to_text(text).encode("utf-8", "replace").decode("utf-8")
    text = text.replace("\r\n", "\n")
    text = _ANSI.sub("", text)
    return _CTRL.sub("", text)


def bound(text, max_bytes):
    """Keeps the head of text within max_bytes of UTF-8. Returns (text, truncated)."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, False
    # errors="ignore" drops a multi-byte character cut in half.
    return data[:max(0, max_bytes)].decode("utf-8", "ignore"), True


class PathScrubber(object):
    """Replaces host paths with placeholders. The candidate and reference files
    become `candidate.py` / `reference.py`; the job's directories become <job>,
    <build>, <home>, <tmp>; torch's install dir becomes <torch>."""

    def __init__(self, candidate_path="", reference_path="", build_dir="", extra=()):
        pairs = []

        def add(path, placeholder):
            if not path:
                return
            for p in {os.path.abspath(path), os.path.realpath(path)}:
                p = p.rstrip("/")
                # Never scrub "/" or tiny prefixes such as "/usr": that would
                # mangle unrelated paths.
                if len(p) > 4 and p.count("/") >= 2:
                    pairs.append((p, placeholder))

        add(candidate_path, "candidate.py")
        add(reference_path, "reference.py")
        add(build_dir, "<build>")
        add(os.environ.get("TORCH_EXTENSIONS_DIR", ""), "<build>")
        add(os.environ.get("TRITON_CACHE_DIR", ""), "<triton>")
        add(os.environ.get("TMPDIR", ""), "<tmp>")
        add(os.environ.get("HOME", ""), "<home>")
        for path, placeholder in extra:
            add(path, placeholder)
        for p in (candidate_path, reference_path):
            if p:
                add(os.path.dirname(os.path.abspath(p)), "<job>")
        # Longest first so that a path is replaced before its parent directory.
        pairs.sort(key=lambda kv: -len(kv[0]))
        seen = set()
        self.pairs = [kv for kv in pairs if not (kv[0] in seen or seen.add(kv[0]))]
        if self.pairs:
            alt = "|".join(re.escape(p) for p, _ in self.pairs)
            # A path only matches whole: "/root" must not eat "/rootfs".
            self._re = re.compile("(%s)(?![\\w.-])" % alt)
            self._map = dict(self.pairs)
        else:
            self._re = None

    def scrub(self, text):
        if self._re is None:
            return text
        return self._re.sub(lambda m: self._map[m.group(1)], text)

    def display_path(self, path):
        """The name shown for a file in tracebacks and logs."""
        return self.scrub(os.path.abspath(path)) if path else path


def sanitize(text, scrubber=None, max_bytes=None):
    text = clean(text)
    if scrubber is not None:
        text = scrubber.scrub(text)
    if max_bytes is not None:
        text, _ = bound(text, max_bytes)
    return text
