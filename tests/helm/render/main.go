// kbox-helm-render renders a Helm 3 chart without helm: `helm template` for the chart and
// the values files given, using Go's text/template, sprig and Helm's own template functions
// (see engine.go and docs/operations.md for what it does and does not reproduce).
//
//	kbox-helm-render --chart helm/kbox --values helm/kbox/ci/x-values.yaml --out DIR
//
// writes DIR/values.json (the merged values, for the schema check), DIR/manifest.yaml
// (`helm template`'s output), DIR/objects.json (each object decoded, with its template) and
// DIR/NOTES.txt. --values-only stops after values.json.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// Helm's releaseutil.SplitManifests separator.
var documentSeparator = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

// RenderedObject is one Kubernetes object and the template it came from.
type RenderedObject struct {
	Source string                 `json:"source"`
	Object map[string]interface{} `json:"object"`
}

func main() {
	var valueFiles, apiVersions listFlag
	chartDir := flag.String("chart", "", "chart directory")
	outDir := flag.String("out", "", "output directory")
	releaseName := flag.String("release-name", "kbox", ".Release.Name")
	namespace := flag.String("namespace", "kbox", ".Release.Namespace")
	kubeVersion := flag.String("kube-version", "1.30.0", ".Capabilities.KubeVersion")
	valuesOnly := flag.Bool("values-only", false, "write the merged values.json and stop")
	flag.Var(&valueFiles, "values", "values file (repeatable; later files win)")
	flag.Var(&apiVersions, "api-versions", "extra API version for .Capabilities.APIVersions (repeatable)")
	flag.Parse()
	if *chartDir == "" || *outDir == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: kbox-helm-render --chart DIR --out DIR [--values FILE]... [--values-only]")
		os.Exit(2)
	}
	if err := run(*chartDir, *outDir, *releaseName, *namespace, *kubeVersion, valueFiles, apiVersions, *valuesOnly); err != nil {
		fmt.Fprintln(os.Stderr, "kbox-helm-render: "+err.Error())
		os.Exit(1)
	}
}

func run(chartDir, outDir, release, namespace, kubeVersion string, valueFiles, apiVersions []string, valuesOnly bool) error {
	chartDir = filepath.Clean(chartDir)
	md, err := loadChartMetadata(chartDir)
	if err != nil {
		return err
	}
	defaults, err := readValuesFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	user := map[string]interface{}{}
	for _, f := range valueFiles {
		v, err := readValuesFile(f)
		if err != nil {
			return err
		}
		user = mergeUserValues(user, v)
	}
	values := coalesce(user, defaults)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(outDir, "values.json"), values); err != nil {
		return err
	}
	if valuesOnly {
		return nil
	}

	caps, err := newCapabilities(kubeVersion, apiVersions)
	if err != nil {
		return err
	}
	files, err := loadFiles(chartDir)
	if err != nil {
		return err
	}
	top := map[string]interface{}{
		"Values":       values,
		"Chart":        md,
		"Capabilities": caps,
		"Files":        files,
		"Release": map[string]interface{}{
			"Name": release, "Namespace": namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
	}
	rendered, err := Render(chartDir, md, top)
	if err != nil {
		return err
	}

	var manifest strings.Builder
	objects := []RenderedObject{}
	for _, r := range rendered {
		if strings.HasSuffix(r.Name, "/NOTES.txt") {
			if err := os.WriteFile(filepath.Join(outDir, "NOTES.txt"), []byte(r.Text), 0o644); err != nil {
				return err
			}
			continue
		}
		for _, doc := range documentSeparator.Split(r.Text, -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			parsed, err := parseYAML([]byte(doc), true)
			if err != nil {
				return fmt.Errorf("YAML parse error on %s: %v\n%s", r.Name, err, numbered(doc))
			}
			if parsed == nil {
				continue // only comments
			}
			obj, ok := parsed.(map[string]interface{})
			if !ok {
				return fmt.Errorf("%s: a document is not a map:\n%s", r.Name, numbered(doc))
			}
			objects = append(objects, RenderedObject{Source: r.Name, Object: obj})
			fmt.Fprintf(&manifest, "---\n# Source: %s\n%s\n", r.Name, strings.TrimSpace(doc))
		}
	}
	if err := os.WriteFile(filepath.Join(outDir, "manifest.yaml"), []byte(manifest.String()), 0o644); err != nil {
		return err
	}
	return writeJSON(filepath.Join(outDir, "objects.json"), objects)
}

func writeJSON(path string, v interface{}) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// numbered prefixes each line with its number, for error messages about a rendered document.
func numbered(doc string) string {
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		lines[i] = fmt.Sprintf("%4d | %s", i+1, l)
	}
	return strings.Join(lines, "\n")
}
