package hook

import "testing"

func TestSelectClass(t *testing.T) {
	crio := map[string]string{RuntimeHandlerAnnotation: "kata"}
	crioDefault := map[string]string{RuntimeHandlerAnnotation: ""}
	other := map[string]string{"io.kubernetes.cri.container-name": "app"}
	tests := []struct {
		name        string
		flag        string
		annotations []map[string]string
		class, from string
	}{
		{name: "flag wins over the annotation", flag: "fast", annotations: []map[string]string{crio}, class: "fast", from: "--runtime-class"},
		{name: "flag default", flag: "default", class: "default", from: "--runtime-class"},
		{name: "CRI-O annotation", annotations: []map[string]string{crio}, class: "kata", from: "annotation io.kubernetes.cri-o.RuntimeHandler"},
		{name: "annotation of the state before the spec's", annotations: []map[string]string{other, crio, crioDefault}, class: "kata", from: "annotation io.kubernetes.cri-o.RuntimeHandler"},
		{name: "CRI-O's default handler is the default class", annotations: []map[string]string{crioDefault}, class: "default", from: "annotation io.kubernetes.cri-o.RuntimeHandler"},
		{name: "nothing: default", annotations: []map[string]string{nil, other}, class: "default", from: "default: no --runtime-class and no io.kubernetes.cri-o.RuntimeHandler annotation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel := SelectClass(tt.flag, tt.annotations...)
			if sel.Class() != tt.class || sel.From != tt.from {
				t.Errorf("SelectClass(%q, %v) = class %q from %q; want %q from %q", tt.flag, tt.annotations, sel.Class(), sel.From, tt.class, tt.from)
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
