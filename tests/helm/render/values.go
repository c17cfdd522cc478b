package main

// Values: loading YAML the way Helm does, and merging values files the way
// `helm template -f A -f B` does.
//
// Helm reads YAML through sigs.k8s.io/yaml: YAML 1.1 (gopkg.in/yaml.v2 underneath) converted
// to JSON and decoded into map[string]interface{}, so every number becomes a float64 and
// every map key a string. Templates see exactly those types, which matters: `{{ 1000000 }}`
// from values prints as 1e+06 under Helm, and a chart that forgets `int64` must fail here
// as it would there.

import (
	"fmt"
	"os"
	"sort"
	"time"

	"gopkg.in/yaml.v2"
)

// parseYAML decodes one YAML document into JSON-compatible values. strict rejects duplicate
// keys, as the Kubernetes API server's strict field validation does.
func parseYAML(data []byte, strict bool) (interface{}, error) {
	var raw interface{}
	var err error
	if strict {
		err = yaml.UnmarshalStrict(data, &raw)
	} else {
		err = yaml.Unmarshal(data, &raw)
	}
	if err != nil {
		return nil, err
	}
	return jsonCompatible(raw)
}

// jsonCompatible converts yaml.v2's types into what a JSON round trip gives: string keys,
// float64 numbers, []interface{} lists.
func jsonCompatible(v interface{}) (interface{}, error) {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, val := range t {
			conv, err := jsonCompatible(val)
			if err != nil {
				return nil, err
			}
			out[fmt.Sprint(k)] = conv
		}
		return out, nil
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, val := range t {
			conv, err := jsonCompatible(val)
			if err != nil {
				return nil, err
			}
			out[k] = conv
		}
		return out, nil
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, val := range t {
			conv, err := jsonCompatible(val)
			if err != nil {
				return nil, err
			}
			out[i] = conv
		}
		return out, nil
	case int:
		return float64(t), nil
	case int64:
		return float64(t), nil
	case uint64:
		return float64(t), nil
	case float64, string, bool, nil:
		return t, nil
	case time.Time:
		return t.Format(time.RFC3339Nano), nil
	default:
		return nil, fmt.Errorf("unsupported YAML value %v (%T)", v, v)
	}
}

// readValuesFile loads a values file; an empty file is an empty map.
func readValuesFile(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := parseYAML(data, false)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if v == nil {
		return map[string]interface{}{}, nil
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: top level is not a map", path)
	}
	return m, nil
}

// mergeUserValues merges -f files left to right, later files winning, maps merged key by
// key (Helm's mergeMaps). A null stays null here; coalesce below turns it into a deletion.
func mergeUserValues(dst, src map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(dst))
	for k, v := range dst {
		out[k] = v
	}
	for k, v := range src {
		if srcMap, ok := v.(map[string]interface{}); ok {
			if dstMap, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeUserValues(dstMap, srcMap)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesce lays the user's values over the chart's defaults (Helm's CoalesceValues): user
// values win, maps are merged, and a user null deletes the key, default included.
func coalesce(user, defaults map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(defaults))
	keys := make([]string, 0, len(user)+len(defaults))
	for k := range defaults {
		keys = append(keys, k)
	}
	for k := range user {
		if _, ok := defaults[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		uv, inUser := user[k]
		dv, inDefaults := defaults[k]
		switch {
		case inUser && uv == nil:
			// null removes the key.
		case inUser && inDefaults:
			um, uIsMap := uv.(map[string]interface{})
			dm, dIsMap := dv.(map[string]interface{})
			if uIsMap && dIsMap {
				out[k] = coalesce(um, dm)
			} else {
				out[k] = uv
			}
		case inUser:
			out[k] = uv
		default:
			out[k] = dv
		}
	}
	return out
}
