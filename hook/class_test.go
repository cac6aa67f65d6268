package hook

import (
	"strings"
	"testing"
)

func TestSelectClass(t *testing.T) {
	crio := map[string]string{RuntimeHandlerAnnotation: "kata"}
	crioDefault := map[string]string{RuntimeHandlerAnnotation: ""}
	other := map[string]string{"io.kubernetes.cri.container-name": "app"}
	tests := []struct {
		name        string
		flag        string
		trust       bool // --trust-runtime-handler-annotation
		annotations []map[string]string
		class, from string
		err         string
	}{
		{name: "flag wins over the annotation", flag: "fast", annotations: []map[string]string{crio}, class: "fast", from: "--runtime-class"},
		{name: "flag wins over a trusted annotation", flag: "fast", trust: true, annotations: []map[string]string{crio}, class: "fast", from: "--runtime-class"},
		{name: "flag default", flag: "default", class: "default", from: "--runtime-class"},
		{name: "trusted CRI-O annotation", trust: true, annotations: []map[string]string{crio}, class: "kata", from: "annotation io.kubernetes.cri-o.RuntimeHandler"},
		{name: "annotation of the state before the spec's", trust: true, annotations: []map[string]string{other, crio, crioDefault}, class: "kata", from: "annotation io.kubernetes.cri-o.RuntimeHandler"},
		{name: "CRI-O's default handler is the default class", trust: true, annotations: []map[string]string{crioDefault}, class: "default", from: "annotation io.kubernetes.cri-o.RuntimeHandler"},
		{name: "trusted, nothing: default", trust: true, annotations: []map[string]string{nil, other}, class: "default", from: "default: no --runtime-class and no io.kubernetes.cri-o.RuntimeHandler annotation"},
		// A pod can set the annotation itself: without the trust flag it never picks the class.
		{name: "untrusted annotation: refused", annotations: []map[string]string{crio},
			err: "no --runtime-class: hook mode needs it to name the runtime class (the io.kubernetes.cri-o.RuntimeHandler annotation, which a pod can set itself, is used only with --trust-runtime-handler-annotation)"},
		{name: "nothing, untrusted: refused", annotations: []map[string]string{nil, other}, err: "no --runtime-class: hook mode needs it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := SelectClass(tt.flag, tt.trust, tt.annotations...)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("SelectClass(%q, %v, %v) = %+v, %v; want error %q", tt.flag, tt.trust, tt.annotations, sel, err, tt.err)
				}
				return
			}
			if err != nil || sel.Class() != tt.class || sel.From != tt.from {
				t.Errorf("SelectClass(%q, %v, %v) = class %q from %q, %v; want %q from %q", tt.flag, tt.trust, tt.annotations, sel.Class(), sel.From, err, tt.class, tt.from)
			}
		})
	}
}

func TestContainerOf(t *testing.T) {
	tests := []struct {
		id          string
		annotations map[string]string
		want        string
	}{
		{id: "abc", want: "abc"},
		{id: "abc", annotations: map[string]string{"io.kubernetes.cri.sandbox-namespace": "ns", "io.kubernetes.cri.sandbox-name": "pod", "io.kubernetes.cri.container-name": "app"}, want: "ns/pod/app"},
		{id: "abc", annotations: map[string]string{"io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.name": "pod", "io.kubernetes.container.name": "app"}, want: "ns/pod/app"},
		{id: "abc", annotations: map[string]string{"io.kubernetes.container.name": "app"}, want: "app"},
		{id: "abc", annotations: map[string]string{"io.kubernetes.cri.sandbox-name": "pod"}, want: "abc"},
	}
	for _, tt := range tests {
		if got := containerOf(tt.id, tt.annotations).String(); got != tt.want {
			t.Errorf("containerOf(%q, %v) = %q, want %q", tt.id, tt.annotations, got, tt.want)
		}
	}
}
