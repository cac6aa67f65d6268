// Command emptyhook is a Go program that does nothing: as a runtime hook it measures the floor
// any Go hook pays (exec, the runtime's start, the runtime waiting for it), against which
// BenchmarkRuncRunHook puts mountkeeper-hook.
package main

func main() {}
