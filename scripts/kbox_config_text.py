"""kboxd's config file from settings named one per line.

kboxd reads a text-format DaemonConfig whose top level holds sections only
(proto/kbox/v1/config.proto: `listener { ... }`, `scheduling { ... }`, ...).
Tools and tests that put a config together from pieces (a shared base plus
a line of their own) write the settings one per line, `name: value`, and
sectioned() files each under its section, read from config.proto itself so
that a setting moved to another section needs no change here.
"""
import os
import re

_PROTO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "proto", "kbox", "v1", "config.proto")
_FIELD = re.compile(r"^\s+(?:optional\s+|repeated\s+)?[\w.]+\s+(\w+)\s*=\s*\d+\s*;", re.M)


def section_of_each_setting(proto_path=_PROTO):
    """{setting name: section name} from config.proto's DaemonConfig."""
    with open(proto_path) as f:
        text = f.read()
    bodies = dict(re.findall(r"^message (\w+) \{\n(.*?)^\}", text, flags=re.M | re.S))
    sections = re.findall(r"^\s+(\w+)\s+(\w+)\s*=\s*\d+\s*;", bodies["DaemonConfig"], flags=re.M)
    return {setting: section for type_name, section in sections for setting in _FIELD.findall(bodies[type_name])}


def sectioned(text, proto_path=_PROTO):
    """`text`'s `name: value` lines grouped into their sections, in the order
    the sections first appear; comments and blank lines are dropped. A name
    that is no setting raises ValueError (kboxd would refuse the file)."""
    where = section_of_each_setting(proto_path)
    groups = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = line.split(":", 1)[0].strip()
        if name not in where:
            raise ValueError("%r is not a kboxd setting (proto/kbox/v1/config.proto)" % name)
        groups.setdefault(where[name], []).append(line)
    return "".join("%s {\n%s}\n" % (section, "".join("  %s\n" % l for l in lines))
                   for section, lines in groups.items())
