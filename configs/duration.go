package configs

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as Go writes it ("30s", "1m30s", "1500ms").
type Duration time.Duration

// UnmarshalYAML refuses bare numbers: "30" could mean seconds or nanoseconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil || n.Tag != "!!str" {
		return fmt.Errorf("line %d: duration %q: write it with a unit, e.g. \"30s\" or \"1500ms\"", n.Line, n.Value)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: duration %q: %v", n.Line, s, err)
	}
	*d = Duration(v)
	return nil
}
