// Package cli parses the commands' flags alike: -h or --help prints the
// usage on stdout (exit 0); an unknown flag, a bad value or a stray
// positional argument (after which Go's flag package would drop every flag)
// is one line naming it, with a hint to run --help (exit 2), instead of the
// whole usage.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit statuses of Parse.
const (
	ExitHelp  = 0 // -h or --help: the usage was printed
	ExitUsage = 2 // a flag or argument error: one line was printed
)

// Parse parses args into fs, whose name is the command as typed
// (efs-csi-driver, efs-csi-driver audit). It returns ok when the command
// may run; else the exit status, having printed the usage to stdout
// (--help) or one line to stderr (an error). fs must be ContinueOnError.
func Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	usage := fs.Usage
	fs.Usage = func() {} // the error is said in one line below, not the whole usage
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(stdout, "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
		return ExitHelp, false
	}
	fs.SetOutput(stderr)
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q: the command takes flags only (a flag after it would be ignored)", fs.Arg(0))
	}
	if err != nil {
		msg := err.Error()
		if name, found := strings.CutPrefix(msg, "flag provided but not defined: -"); found {
			msg = "unknown flag --" + name
		}
		fmt.Fprintf(stderr, "%s: %s; run '%s --help'\n", fs.Name(), msg, fs.Name())
		return ExitUsage, false
	}
	return 0, true
}
