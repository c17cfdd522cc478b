package main

// The renderer's Helm semantics that the chart relies on, each pinned by a case.

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func mustParse(t *testing.T, text string) map[string]interface{} {
	t.Helper()
	v, err := parseYAML([]byte(text), false)
	if err != nil {
		t.Fatal(err)
	}
	return v.(map[string]interface{})
}

func TestCoalesceUserWinsMapsMergeNullDeletes(t *testing.T) {
	defaults := mustParse(t, "a: 1\nm: {x: 1, y: 2}\ngone: {k: v}\nkeep: true\n")
	user := mustParse(t, "a: 2\nm: {y: 3, z: 4}\ngone: null\n")
	got := coalesce(user, defaults)
	want := mustParse(t, "a: 2\nm: {x: 1, y: 3, z: 4}\nkeep: true\n")
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestLaterValuesFilesWin(t *testing.T) {
	merged := mergeUserValues(mustParse(t, "m: {x: 1, y: 1}\n"), mustParse(t, "m: {y: 2}\n"))
	if want := mustParse(t, "m: {x: 1, y: 2}\n"); !reflect.DeepEqual(merged, want) {
		t.Fatalf("got %v, want %v", merged, want)
	}
}

func TestValuesAreYAML11WithJSONNumbers(t *testing.T) {
	v := mustParse(t, "port: 8080\nflag: yes\nbig: 21474836480\n")
	if _, ok := v["port"].(float64); !ok {
		t.Fatalf("numbers must decode as float64 (Helm's JSON round trip), got %T", v["port"])
	}
	if v["flag"] != true {
		t.Fatalf("YAML 1.1: yes is a boolean, got %v", v["flag"])
	}
	if got := toYAML(v); !strings.Contains(got, "big: 21474836480") {
		t.Fatalf("toYaml must print integral numbers in full, got %q", got)
	}
}

func TestDuplicateKeysRejectedInManifests(t *testing.T) {
	if _, err := parseYAML([]byte("a: 1\na: 2\n"), true); err == nil {
		t.Fatal("a duplicate key must be an error in strict mode")
	}
}

// renderChart writes a one-template chart and renders it with the given values.
func renderChart(t *testing.T, tpl, values string) (string, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "demo")
	if err := os.MkdirAll(filepath.Join(dir, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"Chart.yaml":             "apiVersion: v2\nname: demo\nversion: 1.2.3\nappVersion: \"4.5\"\n",
		"values.yaml":            values,
		"files/data.txt":         "payload\n",
		"templates/_helpers.tpl": `{{- define "demo.name" -}}{{ .Chart.Name }}-{{ .Values.suffix }}{{- end }}`,
		"templates/out.yaml":     tpl,
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	md, err := loadChartMetadata(dir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := readValuesFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files2, err := loadFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	caps, _ := newCapabilities("1.30.0", []string{"monitoring.coreos.com/v1"})
	out, err := Render(dir, md, map[string]interface{}{"Values": vals, "Chart": md, "Files": files2,
		"Capabilities": caps, "Release": map[string]interface{}{"Name": "r", "Namespace": "ns"}})
	if err != nil {
		return "", err
	}
	return out[0].Text, nil
}

func TestHelmFunctionsAndObjects(t *testing.T) {
	got, err := renderChart(t, `a: {{ include "demo.name" . }}
b: {{ tpl "{{ .Values.suffix }}!" . }}
c: {{ .Values.big }}
d: {{ int64 .Values.big }}
e: {{ .Files.Get "files/data.txt" | trim }}
f: {{ .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}
g: {{ .Chart.AppVersion }} {{ .Release.Namespace }} {{ .Template.Name }}
h: {{ .Values.missing }}
`, "suffix: x\nbig: 1000000\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "a: demo-x\nb: x!\nc: 1e+06\nd: 1000000\ne: payload\nf: true\ng: 4.5 ns demo/templates/out.yaml\nh: \n"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestRequiredAndFailStopRendering(t *testing.T) {
	if _, err := renderChart(t, `{{ required "need suffix" .Values.suffix }}`, "suffix: \"\"\n"); err == nil ||
		!strings.Contains(err.Error(), "need suffix") {
		t.Fatalf("required on an empty string must fail with its message, got %v", err)
	}
	if _, err := renderChart(t, `{{ env "HOME" }}`, ""); err == nil {
		t.Fatal("env must not exist (Helm removes it)")
	}
}
