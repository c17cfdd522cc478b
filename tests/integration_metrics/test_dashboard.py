"""The Grafana dashboard (helm/kbox/files/grafana-dashboard.json) is
well-formed, and every PromQL expression in it names only metrics the live
kboxd exports."""
import json
import os
import re

import metrics_text

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD = os.path.join(HERE, "..", "..", "helm", "kbox", "files", "grafana-dashboard.json")

# PromQL words that are not metric names (aggregations too: "sum by (x) (...)"
# puts "by", not "(", after the operator).
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
            "bool", "offset", "inf", "nan", "sum", "min", "max", "avg", "group", "stddev", "stdvar",
            "count", "count_values", "bottomk", "topk", "quantile"}


def metric_names(expr):
    """The metric names an expression selects: identifiers that are not
    functions, keywords, label names in groupings, or inside strings,
    matchers and ranges."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                 # string literals
    e = re.sub(r"\{[^}]*\}", "", e)                              # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                             # range selectors
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", e)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        word = m.group(0)
        follows = e[m.end():].lstrip()[:1]
        prev = e[:m.start()][-1:]
        if follows == "(" or word.lower() in KEYWORDS or prev.isdigit() or prev == "$":
            continue
        names.add(word)
    return names


def expressions(dashboard):
    """(where, PromQL) for every panel target (rows included) and query variable."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append(("panel %r" % p.get("title"), t["expr"]))
            walk(p.get("panels", []))
    walk(dashboard["panels"])
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            # label_values(metric, label): the metric is its first argument.
            m = re.match(r"\s*label_values\(\s*([^,)]+)", q)
            out.append(("variable %r" % v["name"], m.group(1) if m else q))
    return out


def family_of(name, types):
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[:-len(suffix)]) == "histogram":
            return name[:-len(suffix)]
    return name


def load():
    with open(DASHBOARD, "r", encoding="utf-8") as f:
        return json.load(f)


def test_dashboard_is_well_formed():
    d = load()
    assert d["uid"] and d["title"]
    assert isinstance(d["panels"], list) and d["panels"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for p in d["panels"]:
        assert p["targets"], p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["refId"], p["title"]
            # Every query follows the instance selector.
            assert '$instance' in t["expr"], (p["title"], t["expr"])


def test_metric_name_parser():
    assert metric_names('histogram_quantile(0.95, sum by (le, phase) '
                        '(rate(kbox_x_bucket{instance=~"$instance",a="b c"}[5m])))') == {"kbox_x_bucket"}
    assert metric_names("sum(a_total) / (sum(b) + on(instance) c) > 0.5 and d offset 5m") == \
        {"a_total", "b", "c", "d"}


def test_every_query_names_only_exported_metrics(kboxd):
    exported = metrics_text.parse(kboxd.metrics())
    # Sample names: histograms appear as _bucket/_sum/_count only.
    names = set(exported.names())
    assert "kbox_job_phase_duration_seconds_bucket" in names
    used = set()
    for where, expr in expressions(load()):
        found = metric_names(expr)
        assert found, "%s: no metric in %r" % (where, expr)
        unknown = found - names
        assert not unknown, "%s names metrics kboxd does not export: %s" % (where, sorted(unknown))
        used |= found
    # The dashboard shows every family kboxd exports.
    families = {family_of(n, exported.types) for n in used}
    assert set(exported.types) <= families, sorted(set(exported.types) - families)
