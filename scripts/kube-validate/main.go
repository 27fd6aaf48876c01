// kube-validate: each YAML document on stdin (helm template's output) decoded strictly into the Kubernetes API type
// its apiVersion and kind name (k8s.io/api, the Prometheus Operator's monitoring/v1): an unknown field, a wrong type
// or an unknown kind fails. It checks what the Go types define, not the server's OpenAPI schema (required fields,
// formats) nor admission.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func typed(apiVersion, kind string) (any, bool) {
	switch apiVersion + "/" + kind {
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1/Service":
		return &corev1.Service{}, true
	case "apps/v1/DaemonSet":
		return &appsv1.DaemonSet{}, true
	case "monitoring.coreos.com/v1/PodMonitor":
		return &monitoringv1.PodMonitor{}, true
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, true
	}
	return nil, false
}

// documents splits a YAML stream at its "---" lines, dropping the empty ones.
func documents(r io.Reader) ([][]byte, error) {
	var docs [][]byte
	var cur bytes.Buffer
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	flush := func() {
		if strings.TrimSpace(cur.String()) != "" {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
		}
		cur.Reset()
	}
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, "---") {
			flush()
			continue
		}
		cur.WriteString(line + "\n")
	}
	flush()
	return docs, scanner.Err()
}

func main() {
	docs, err := documents(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-validate:", err)
		os.Exit(2)
	}
	failed := 0
	for i, doc := range docs {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			fmt.Printf("document %d: %v\n", i+1, err)
			failed++
			continue
		}
		obj, ok := typed(head.APIVersion, head.Kind)
		if !ok {
			fmt.Printf("document %d: %s %s: a kind this validator does not know\n", i+1, head.APIVersion, head.Kind)
			failed++
			continue
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			fmt.Printf("%s/%s: %v\n", head.Kind, head.Metadata.Name, err)
			failed++
			continue
		}
		fmt.Printf("%s/%s: valid %s\n", head.Kind, head.Metadata.Name, head.APIVersion)
	}
	if len(docs) == 0 {
		fmt.Println("kube-validate: no documents")
		os.Exit(1)
	}
	if failed > 0 {
		os.Exit(1)
	}
}
