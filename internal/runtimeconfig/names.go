package runtimeconfig

import (
	"fmt"
	"regexp"

	"github.com/mountkeeper/mountkeeper/configs"
)

// handlerName is an RFC 1123 label: what Kubernetes accepts as a RuntimeClass's handler.
var handlerName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// HandlerClasses returns the config's runtime classes that get a handler of their own: all but
// the default class, whose pods run on the runtime's default handler (a guard there would hold
// every pod without a runtime class, mountkeeper's own among them). Each must be a valid
// handler name: it becomes a key of the runtime's config and a file name.
func HandlerClasses(cfg *configs.Config) ([]string, error) {
	var out []string
	for _, class := range cfg.ClassNames() {
		if class == configs.DefaultClass {
			continue
		}
		if len(class) > 63 || !handlerName.MatchString(class) {
			return nil, fmt.Errorf("runtime class %q: not a runtime handler name: Kubernetes requires a RuntimeClass handler to be a lowercase RFC 1123 label (at most 63 of a-z, 0-9 and '-', starting and ending with a letter or digit); rename the class in the config", class)
		}
		out = append(out, class)
	}
	return out, nil
}
