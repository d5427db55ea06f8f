// Command testsum runs the stages of "make test", keeps what "go test -json"
// reports, and ends the run with a summary that fails on any failed test
// and on any skip nobody asked for.
//
//	testsum run    -dir D -stage S [-provider P] [-v] -- go test -json ...
//	testsum fuzz   -dir D -fuzztime 5s [-race] [packages]
//	testsum record -dir D -stage S -seconds N -exit N
//	testsum report -dir D [-stages a,b,...] [-left-out TEXT]...
//
// run starts the command, writes its test2json events to D, prints a
// compact log (each package's result, the output of failed tests, top-level
// tests that took a second or more) and exits with the command's status.
// fuzz lists the Fuzz targets of the packages ("go test -list") and runs each
// one for -fuzztime as a step of stage "fuzz"; a target that fails with
// nothing but the fuzzing engine's own deadline ("context deadline
// exceeded", no failing input: go.dev/issue/75804, fixed in Go 1.27) is
// run again once, and the report lists that apart. record notes a stage that
// is not a go test run (set-up, vet). report reads everything in D and
// prints the tables; it exits 1 when a stage failed, a test failed, a
// package failed outside its tests, or a test was skipped for a reason
// other than an exclusion that was asked for ("not requested:
// FENCELOCK_X=V" while FENCELOCK_X was V).
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	code := 0
	switch os.Args[1] {
	case "run":
		code, err = cmdRun(os.Args[2:])
	case "fuzz":
		code, err = cmdFuzz(os.Args[2:])
	case "record":
		err = cmdRecord(os.Args[2:])
	case "report":
		code, err = cmdReport(os.Args[2:], os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testsum: %v\n", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  testsum run    -dir D -stage S [-provider P] [-v] -- command [args...]
  testsum fuzz   -dir D -fuzztime 5s [-race] [packages]
  testsum record -dir D -stage S -seconds N -exit N
  testsum report -dir D [-stages a,b,...] [-left-out TEXT]...
`)
	os.Exit(2)
}
