package main

import (
	"errors"
	"io"
)

// runHook wires `mountkeeper hook <stage>` to package hook.
func runHook(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return errors.New("hook mode is not implemented yet")
}
