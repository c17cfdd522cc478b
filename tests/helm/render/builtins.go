package main

// Helm's built-in objects as templates see them: .Chart (Chart.yaml's fields under Helm's
// Go names), .Release, .Capabilities, .Files and .Template.

import (
	"encoding/base64"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v2"
)

// ChartMetadata mirrors the fields of helm.sh/helm/v3/pkg/chart.Metadata that a chart reads.
type ChartMetadata struct {
	APIVersion   string            `yaml:"apiVersion"`
	Name         string            `yaml:"name"`
	Version      string            `yaml:"version"`
	AppVersion   string            `yaml:"appVersion"`
	KubeVersion  string            `yaml:"kubeVersion"`
	Description  string            `yaml:"description"`
	Type         string            `yaml:"type"`
	Keywords     []string          `yaml:"keywords"`
	Home         string            `yaml:"home"`
	Sources      []string          `yaml:"sources"`
	Icon         string            `yaml:"icon"`
	Deprecated   bool              `yaml:"deprecated"`
	Annotations  map[string]string `yaml:"annotations"`
	Maintainers  []Maintainer      `yaml:"maintainers"`
	Dependencies []interface{}     `yaml:"dependencies"`
}

// Maintainer is one entry of Chart.yaml's maintainers.
type Maintainer struct {
	Name  string `yaml:"name"`
	Email string `yaml:"email"`
	URL   string `yaml:"url"`
}

// loadChartMetadata reads Chart.yaml strictly (an unknown field is an error, as `helm lint`
// reports) and checks what Helm requires of it.
func loadChartMetadata(chartDir string) (*ChartMetadata, error) {
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	var md ChartMetadata
	if err := yaml.UnmarshalStrict(data, &md); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %v", err)
	}
	switch {
	case md.APIVersion != "v2":
		return nil, fmt.Errorf("Chart.yaml: apiVersion must be v2 (Helm 3), got %q", md.APIVersion)
	case md.Name == "" || md.Version == "":
		return nil, fmt.Errorf("Chart.yaml: name and version are required")
	case md.Name != filepath.Base(chartDir):
		return nil, fmt.Errorf("Chart.yaml: name %q does not match the chart folder %q", md.Name, filepath.Base(chartDir))
	case md.Type != "" && md.Type != "application" && md.Type != "library":
		return nil, fmt.Errorf("Chart.yaml: type must be application or library")
	}
	if _, err := parseSemver(md.Version); err != nil {
		return nil, fmt.Errorf("Chart.yaml: version %q is not SemVer 2: %v", md.Version, err)
	}
	return &md, nil
}

// VersionSet is .Capabilities.APIVersions.
type VersionSet []string

// Has is what templates call: `.Capabilities.APIVersions.Has "monitoring.coreos.com/v1"`.
func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

// KubeVersion is .Capabilities.KubeVersion.
type KubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

func (k KubeVersion) String() string { return k.Version }

// Capabilities is .Capabilities.
type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
	HelmVersion map[string]string
}

// The API groups a stock cluster serves; --api-versions adds more (CRDs).
var builtinAPIVersions = []string{
	"v1", "apps/v1", "batch/v1", "policy/v1", "networking.k8s.io/v1", "rbac.authorization.k8s.io/v1",
	"autoscaling/v2", "storage.k8s.io/v1", "scheduling.k8s.io/v1", "node.k8s.io/v1",
	"apiextensions.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1",
}

func newCapabilities(kubeVersion string, extraAPIVersions []string) (*Capabilities, error) {
	v, err := parseSemver(strings.TrimPrefix(kubeVersion, "v"))
	if err != nil {
		return nil, fmt.Errorf("--kube-version %q: %v", kubeVersion, err)
	}
	apis := append(VersionSet{}, builtinAPIVersions...)
	apis = append(apis, extraAPIVersions...)
	full := "v" + strings.TrimPrefix(kubeVersion, "v")
	return &Capabilities{
		KubeVersion: KubeVersion{Version: full, Major: fmt.Sprint(v[0]), Minor: fmt.Sprint(v[1]), GitVersion: full},
		APIVersions: apis,
		HelmVersion: map[string]string{"Version": "v3-compatible (kbox test renderer)"},
	}, nil
}

// parseSemver accepts MAJOR.MINOR.PATCH with optional -pre and +build parts.
func parseSemver(s string) ([3]uint64, error) {
	var out [3]uint64
	core := s
	if i := strings.IndexAny(core, "-+"); i >= 0 {
		core = core[:i]
	}
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return out, fmt.Errorf("want MAJOR.MINOR.PATCH")
	}
	for i, p := range parts {
		if p == "" || (len(p) > 1 && p[0] == '0') {
			return out, fmt.Errorf("bad number %q", p)
		}
		var n uint64
		for _, c := range p {
			if c < '0' || c > '9' {
				return out, fmt.Errorf("bad number %q", p)
			}
			n = n*10 + uint64(c-'0')
		}
		out[i] = n
	}
	return out, nil
}

// Files is .Files: the chart's files outside templates/ and the files Helm loads itself.
type Files map[string][]byte

// Files Helm's loader consumes and so does not offer through .Files.
var loaderOwned = map[string]bool{"Chart.yaml": true, "values.yaml": true, "values.schema.json": true,
	"Chart.lock": true, "requirements.yaml": true, "requirements.lock": true}

func loadFiles(chartDir string) (Files, error) {
	files := Files{}
	err := filepath.Walk(chartDir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		rel = filepath.ToSlash(rel)
		if info.IsDir() {
			if rel == "templates" || rel == "charts" {
				return filepath.SkipDir
			}
			return nil
		}
		if loaderOwned[rel] || rel == ".helmignore" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[rel] = data
		return nil
	})
	return files, err
}

// Get returns a file's contents, or "" for a file that is not there (as Helm does).
func (f Files) Get(name string) string { return string(f[name]) }

// GetBytes returns a file's contents as bytes.
func (f Files) GetBytes(name string) []byte { return f[name] }

// Lines returns a file's lines.
func (f Files) Lines(name string) []string {
	if f[name] == nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(f[name]), "\n"), "\n")
}

// Glob returns the files whose path matches a pattern.
func (f Files) Glob(pattern string) Files {
	out := Files{}
	for name, data := range f {
		if ok, _ := path.Match(pattern, name); ok {
			out[name] = data
		}
	}
	return out
}

func (f Files) sortedNames() []string {
	names := make([]string, 0, len(f))
	for n := range f {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// AsConfig renders the files as a ConfigMap's data (base name: contents).
func (f Files) AsConfig() string {
	m := map[string]interface{}{}
	for _, n := range f.sortedNames() {
		m[path.Base(n)] = string(f[n])
	}
	return toYAML(m)
}

// AsSecrets renders the files as a Secret's data (base name: base64 contents).
func (f Files) AsSecrets() string {
	m := map[string]interface{}{}
	for _, n := range f.sortedNames() {
		m[path.Base(n)] = base64.StdEncoding.EncodeToString(f[n])
	}
	return toYAML(m)
}
