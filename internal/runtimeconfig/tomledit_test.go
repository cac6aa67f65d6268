package runtimeconfig

import (
	"strings"
	"testing"
)

const dropIn = "/etc/containerd/conf.d/99-mountkeeper.toml"

// TestAddRemoveImport: AddImport adds the drop-in and nothing else (every line of the
// operator's file is still there, in order), and RemoveImport gives the file back byte for
// byte.
func TestAddRemoveImport(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"kubeadm-like, no imports", "# kubeadm's config\nversion = 3\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = true # systemd driver\n",
			"# kubeadm's config\nversion = 3\nimports = ['" + dropIn + "']" + importComment + "\n\n[plugins"},
		{"no version", "root = '/var/lib/containerd'\n", "imports = ['" + dropIn + "']" + importComment + "\nroot = "},
		{"version without newline", "version = 3", "imports = ['" + dropIn + "']" + importComment + "\nversion = 3"},
		{"empty", "", "imports = ['" + dropIn + "']"},
		{"imports of its own", "version = 3\nimports = ['/etc/containerd/extra.toml'] # ours\n", "imports = ['/etc/containerd/extra.toml', '" + dropIn + "'] # ours\n"},
		{"an empty imports array", "version = 3\nimports = []\n", "imports = ['" + dropIn + "']\n"},
		{"multi-line with a trailing comma and comments", "version = 3\nimports = [\n  \"/a.toml\", # a\n  '/b.toml', # [b]\n]\n[x]\ny = 1\n", "  '/b.toml', # [b]\n'" + dropIn + "']\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := AddImport([]byte(tc.src), dropIn)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("AddImport:\n%s\nwant it to hold:\n%s", out, tc.want)
			}
			back, removed, err := RemoveImport(out, dropIn)
			if err != nil || !removed {
				t.Fatalf("RemoveImport: %v (removed %v)", err, removed)
			}
			if string(back) != tc.src {
				t.Errorf("RemoveImport gave\n%q\nwant the original\n%q", back, tc.src)
			}
		})
	}
}

func TestAddImportRefuses(t *testing.T) {
	for _, tc := range []struct{ name, src, entry, want string }{
		{"not TOML", "version = = 3\n", dropIn, "parse"},
		{"a quote in the path", "version = 3\n", "/etc/it's.toml", "TOML literal string"},
		{"an array that does not end", "imports = ['/a'\n", dropIn, "parse"},
	} {
		if _, err := AddImport([]byte(tc.src), tc.entry); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestRemoveImportKeepsTheOperators: an operator's edit since configure survives unconfigure;
// a file without the entry is left alone.
func TestRemoveImportKeepsTheOperators(t *testing.T) {
	added, err := AddImport([]byte("version = 3\n"), dropIn)
	if err != nil {
		t.Fatal(err)
	}
	edited := string(added) + "[plugins.'io.containerd.nri.v1.nri']\n  disable = false # the operator's\n"
	back, removed, err := RemoveImport([]byte(edited), dropIn)
	if err != nil || !removed || string(back) != "version = 3\n[plugins.'io.containerd.nri.v1.nri']\n  disable = false # the operator's\n" {
		t.Errorf("RemoveImport after an operator's edit: %q, %v, %v", back, removed, err)
	}
	if out, removed, err := RemoveImport([]byte("version = 3\n"), dropIn); err != nil || removed || string(out) != "version = 3\n" {
		t.Errorf("RemoveImport of a file without the entry: %q, %v, %v", out, removed, err)
	}
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		imports []string
		want    bool
	}{
		{[]string{"/etc/containerd/conf.d/*.toml"}, true},
		{[]string{"conf.d/*.toml"}, true},
		{[]string{dropIn}, true},
		{[]string{"/etc/containerd/conf.d/*.conf"}, false},
		{nil, false},
	} {
		if got := Covers("/etc/containerd/config.toml", tc.imports, dropIn); got != tc.want {
			t.Errorf("Covers(%q) = %v, want %v", tc.imports, got, tc.want)
		}
	}
}
