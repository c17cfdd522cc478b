"""Maps and sanitises a failed extension build's log.

load_inline writes the candidate's source strings into generated files
(main.cpp, cuda.cu, ...) with a torch-version-dependent prologue/epilogue, so
the compiler's line numbers are not the candidate's. We do not hard-code that
layout: each recorded source string is located in the generated file
(str.find) and then in candidate.py, which gives generated line -> candidate
line. Diagnostics `PATH:L:C:` (gcc/clang) and `PATH(L):` (nvcc) are rewritten
to `candidate.py:L:C:` where they map, else to the bare generated file name.
"""
import os
import re

from . import sanitize

# A source path followed by :LINE[:COL] (gcc/clang) or (LINE) (nvcc). Longer
# extensions first so "x.cuh" is not read as "x.cu" + "h".
_DIAG = re.compile(
    r"(?P<path>[^\s:()'\"`]+?\.(?:cuh|cu|cpp|cxx|cc|c|hpp|hxx|h))(?![\w.])"
    r"(?:\((?P<pline>\d+)\)|:(?P<line>\d+)(?::(?P<col>\d+))?)?")
_ERROR = re.compile(r"\b(?:fatal )?error\b", re.IGNORECASE)
_GUTTER = re.compile(r"^(\s*)(\d+)( \| .*)$")  # gcc's source excerpt: "   12 | code"
_PROGRESS = re.compile(r"^\[\d+/\d+\] ")
_LONG_COMMAND = 240


def _line_col(text, offset):
    """1-based line and 0-based column of offset in text."""
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1)


class _Segment(object):
    """One source string as it appears in a generated file."""

    def __init__(self, source, gen_line, gen_col, cand_line, cand_col):
        self.source = source
        self.lines = source.split("\n")
        self.gen_line, self.gen_col = gen_line, gen_col
        self.cand_line, self.cand_col = cand_line, cand_col  # cand_line 0: not verbatim

    def map(self, line, col, candidate_lines):
        k = line - self.gen_line
        if k < 0 or k >= len(self.lines):
            return None
        if self.cand_line:
            ccol = col if k > 0 or not col else col - self.gen_col + self.cand_col
            return self.cand_line + k, ccol
        # The string was built at run time (concatenation, escapes): fall back to
        # the one candidate line with the same text, if it is unique.
        text = self.lines[k].strip()
        if len(text) < 3:
            return None
        hits = [i for i, l in enumerate(candidate_lines) if l.strip() == text]
        if len(hits) != 1:
            return None
        cand = candidate_lines[hits[0]]
        shift = (len(cand) - len(cand.lstrip())) - (len(self.lines[k]) - len(self.lines[k].lstrip()))
        return hits[0] + 1, (col + shift if col else col)


def map_generated_file(gen_text, sources, candidate_text):
    """Segments for each recorded source string found in a generated file.

    Sources are searched in order with a moving cursor (load_inline
    concatenates them in order), which keeps a short string such as an
    #include from matching the prologue."""
    segments = []
    cursor = 0
    for src in sources:
        if not src.strip():
            continue
        at = gen_text.find(src, cursor)
        if at < 0:
            at = gen_text.find(src)
            if at < 0:
                continue
        else:
            cursor = at + len(src)
        gl, gc = _line_col(gen_text, at)
        ca = candidate_text.find(src)
        cl, cc = _line_col(candidate_text, ca) if ca >= 0 else (0, 0)
        segments.append(_Segment(src, gl, gc, cl, cc))
    return segments


def _short_command(line):
    """`[1/3] c++ ... -o main.o` for a ninja/compiler command line."""
    prefix = ""
    m = _PROGRESS.match(line)
    if m:
        prefix, line = m.group(0), line[m.end():]
    words = line.split()
    if not words:
        return prefix.rstrip()
    out = ""
    if "-o" in words[:-1]:
        out = " -o " + os.path.basename(words[words.index("-o") + 1])
    return "%s%s [command omitted]%s" % (prefix, os.path.basename(words[0]), out)


def _drop_commands(lines):
    result = []
    after_failed = False
    for line in lines:
        if _PROGRESS.match(line) or (after_failed and len(line) > 80) or (
                len(line) > _LONG_COMMAND and (" -I" in line or " -D" in line)):
            line = _short_command(line)
        after_failed = line.startswith("FAILED: ")
        result.append(line)
    return result


class LogMapper(object):
    def __init__(self, calls, candidate_path, candidate_text, build_dir, scrubber):
        self.calls = calls
        self.candidate_text = candidate_text
        self.candidate_lines = candidate_text.split("\n")
        self.build_dir = os.path.realpath(build_dir) if build_dir else ""
        self.ext_dirs = [c.get("ext_dir") for c in calls if c.get("ext_dir")]
        self.scrubber = scrubber
        self._files = {}

    def _sources(self):
        out = []
        for call in self.calls:
            for key in ("cpp_sources", "cuda_sources", "sycl_sources"):
                out.extend(call.get("sources", {}).get(key, []))
        return out

    def _resolve(self, path):
        """Real path of a generated file named in the log, or None."""
        bases = [""] if os.path.isabs(path) else list(self.ext_dirs) + [self.build_dir]
        for base in bases:
            full = os.path.realpath(os.path.join(base, path))
            inside = any(full.startswith(os.path.realpath(d) + os.sep)
                         for d in [self.build_dir] + self.ext_dirs if d)
            if inside and os.path.isfile(full):
                return full
        return None

    def _segments(self, path):
        if path not in self._files:
            full = self._resolve(path)
            segs = None
            if full is not None:
                try:
                    with open(full, "r", encoding="utf-8", errors="replace") as f:
                        segs = map_generated_file(f.read(), self._sources(), self.candidate_text)
                except OSError:
                    segs = None
            self._files[path] = (full, segs)
        return self._files[path]

    def map_location(self, path, line, col):
        """(candidate_line, col) for a generated file's line, or None."""
        full, segs = self._segments(path)
        for seg in segs or []:
            hit = seg.map(line, col, self.candidate_lines)
            if hit:
                return hit
        return None

    def rewrite(self, raw):
        """Returns (text, first_error_line) with diagnostics rewritten."""
        text = sanitize.clean(raw)
        first_error = 0
        out = []
        last_map = None  # (generated line, candidate line) of the last diagnostic
        for line in _drop_commands(text.split("\n")):
            g = _GUTTER.match(line)
            if g and last_map and int(g.group(2)) == last_map[0]:
                out.append("%s%d%s" % (g.group(1), last_map[1], g.group(3)))
                continue
            state = {"mapped": None}

            def repl(m):
                path = m.group("path")
                full, _ = self._segments(path)
                if full is None:
                    return m.group(0)  # a header or the candidate's own file: leave it
                lnum = m.group("line") or m.group("pline")
                name = os.path.basename(full)
                if not lnum:
                    return name
                lnum, col = int(lnum), int(m.group("col") or 0)
                hit = self.map_location(path, lnum, col)
                if hit is None:
                    if m.group("pline"):
                        return "%s(%d)" % (name, lnum)
                    return "%s:%d" % (name, lnum) + (":%d" % col if m.group("col") else "")
                if state["mapped"] is None:
                    state["mapped"] = (lnum, hit[0], m.end())
                loc = "candidate.py:%d" % hit[0]
                if m.group("col") and hit[1]:
                    loc += ":%d" % hit[1]
                return loc

            line = _DIAG.sub(repl, line)
            if state["mapped"] is not None:
                last_map = state["mapped"][:2]
                if not first_error and _ERROR.search(line):
                    first_error = last_map[1]
            out.append(line)
        text = "\n".join(out)
        if self.scrubber is not None:
            text = self.scrubber.scrub(text)
        return text, first_error


def first_error_text(text):
    """The first line naming an error, for StageReport.message."""
    for line in text.split("\n"):
        if _ERROR.search(line) and not line.startswith(("FAILED", "ninja:")):
            return line.strip()
    for line in text.split("\n"):
        if line.strip():
            return line.strip()
    return ""


def build_failure_log(output, calls, candidate_path, candidate_text, build_dir, scrubber,
                      max_bytes):
    """A kbox.v1.CompileLog dict for a failed build, plus its first error line's text."""
    mapper = LogMapper(calls, candidate_path, candidate_text, build_dir, scrubber)
    text, first_error = mapper.rewrite(output)
    text = text.strip("\n")
    headline = first_error_text(text)
    text, truncated = sanitize.bound(text, max_bytes)
    return {"text": text, "truncated": truncated, "first_error_line": first_error}, headline
