package main

// The template engine: Go's text/template with sprig's functions and the ones Helm adds
// (helm.sh/helm/v3/pkg/engine: include, tpl, required, toYaml, fromYaml, toJson, fromJson
// and their Array forms), executed the way Helm executes them.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"gopkg.in/yaml.v2"
)

// Helm caps include/tpl recursion at this depth.
const maxIncludeDepth = 1000

// toYAML is Helm's toYaml: sigs.k8s.io/yaml.Marshal (a JSON round trip, then YAML 1.1 via
// yaml.v2, map keys sorted) with the trailing newline trimmed; "" on error.
func toYAML(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var generic interface{}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		return ""
	}
	out, err := yaml.Marshal(numbersForYAML(generic))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(out), "\n")
}

// numbersForYAML turns JSON numbers into int64 where integral (so 1000000 prints as such,
// as sigs.k8s.io/yaml's JSONToYAML does) and float64 otherwise.
func numbersForYAML(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, val := range t {
			t[k] = numbersForYAML(val)
		}
		return t
	case []interface{}:
		for i, val := range t {
			t[i] = numbersForYAML(val)
		}
		return t
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	default:
		return v
	}
}

// fromYAML is Helm's fromYaml: a map, or a map holding "Error" when the text is no map.
func fromYAML(s string) map[string]interface{} {
	v, err := parseYAML([]byte(s), false)
	if err != nil {
		return map[string]interface{}{"Error": err.Error()}
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		if v == nil {
			return map[string]interface{}{}
		}
		return map[string]interface{}{"Error": fmt.Sprintf("not a map: %T", v)}
	}
	return m
}

func fromYAMLArray(s string) []interface{} {
	v, err := parseYAML([]byte(s), false)
	if err != nil {
		return []interface{}{err.Error()}
	}
	a, ok := v.([]interface{})
	if !ok {
		return []interface{}{fmt.Sprintf("not a list: %T", v)}
	}
	return a
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(s string) []interface{} {
	var a []interface{}
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		return []interface{}{err.Error()}
	}
	return a
}

// Engine renders one chart.
type Engine struct {
	set      *template.Template
	included map[string]int
}

// funcMap is sprig's TxtFuncMap less env and expandenv (Helm removes them: a chart must not
// read the renderer's environment), plus Helm's own functions.
func (e *Engine) funcMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["fromYamlArray"] = fromYAMLArray
	f["toJson"] = toJSON
	f["fromJson"] = fromJSON
	f["fromJsonArray"] = fromJSONArray
	f["required"] = func(message string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(message)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(message)
		}
		return v, nil
	}
	f["include"] = func(name string, data interface{}) (string, error) {
		if e.included[name] > maxIncludeDepth {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		e.included[name]++
		defer func() { e.included[name]-- }()
		var b strings.Builder
		if err := e.set.ExecuteTemplate(&b, name, data); err != nil {
			return "", err
		}
		return b.String(), nil
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		// Helm parses the text into a clone of the chart's template set, so `tpl` may
		// include the chart's named templates.
		clone, err := e.set.Clone()
		if err != nil {
			return "", err
		}
		t, err := clone.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %v", text, err)
		}
		var b strings.Builder
		if err := t.Execute(&b, data); err != nil {
			return "", fmt.Errorf("error calling tpl: %v", err)
		}
		return strings.ReplaceAll(b.String(), "<no value>", ""), nil
	}
	return f
}

// RenderedTemplate is one template's output.
type RenderedTemplate struct {
	Name string // e.g. kbox/templates/service.yaml
	Text string
}

// Render executes every template of chartDir/templates (partials, names starting with "_",
// only define things) against the top-level object Helm builds.
func Render(chartDir string, md *ChartMetadata, top map[string]interface{}) ([]RenderedTemplate, error) {
	e := &Engine{included: map[string]int{}}
	// Helm executes with missingkey=zero and blanks "<no value>" afterwards.
	e.set = template.New("chart").Option("missingkey=zero").Funcs(e.funcMap())
	templatesDir := filepath.Join(chartDir, "templates")
	var names []string
	err := filepath.Walk(templatesDir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		name := md.Name + "/" + filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if _, err := e.set.New(name).Parse(string(data)); err != nil {
			return fmt.Errorf("parse error: %v", err)
		}
		names = append(names, name)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []RenderedTemplate
	for _, name := range names {
		if strings.HasPrefix(filepath.Base(name), "_") {
			continue
		}
		vals := make(map[string]interface{}, len(top)+1)
		for k, v := range top {
			vals[k] = v
		}
		vals["Template"] = map[string]interface{}{"Name": name, "BasePath": md.Name + "/templates"}
		var b strings.Builder
		if err := e.set.ExecuteTemplate(&b, name, vals); err != nil {
			return nil, err
		}
		out = append(out, RenderedTemplate{Name: name, Text: strings.ReplaceAll(b.String(), "<no value>", "")})
	}
	return out, nil
}
