package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Set at build time by the release build (.goreleaser.yaml):
//
//	-ldflags "-X main.version=1.2.3 -X main.commit=<sha> -X main.date=<RFC 3339>"
//
// A build that stamps nothing falls back to what the Go toolchain recorded:
// a release's module version (`go install …@v1.2.3`), the VCS revision and
// time of a build in a git checkout. "dev" stays for any other build, and
// "unknown" where the toolchain recorded nothing.
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// buildInfo is what `autodiag --version` and `autodiag version` report.
type buildInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Date     string `json:"date"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// currentBuild combines the stamped variables with the toolchain's record.
func currentBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: date,
		Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "dev" && isReleaseVersion(info.Main.Version) {
			b.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && b.Commit == "":
				b.Commit = s.Value
			case s.Key == "vcs.time" && b.Date == "":
				b.Date = s.Value
			}
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	if b.Date == "" {
		b.Date = "unknown"
	}
	return b
}

// pseudoVersion matches the toolchain's version of an untagged commit
// (v0.0.0-20260102150405-0123456789ab and its pre-release forms).
var pseudoVersion = regexp.MustCompile(`[-.][0-9]{14}-[0-9a-f]{12}$`)

// isReleaseVersion: v names a tagged release, not "(devel)", an untagged
// commit's pseudo-version or a modified tree ("+dirty"), which are
// development builds.
func isReleaseVersion(v string) bool {
	return strings.HasPrefix(v, "v") && !strings.Contains(v, "+") && !pseudoVersion.MatchString(v)
}

func (b buildInfo) String() string {
	return fmt.Sprintf("autodiag %s (commit %s, built %s, %s %s)", b.Version, b.Commit, b.Date, b.Go, b.Platform)
}

// addVersion gives root its --version flag (printed by printVersion) and
// the `version` command, whose --json form is for scripts (inventory,
// upgrade checks). Not cobra's Version and SetVersionTemplate: its version
// template runs text/template, whose reflection (MethodByName) keeps every
// exported method of every SDK client in the binary.
func addVersion(root *cobra.Command) {
	b := currentBuild()
	root.Flags().BoolP("version", "v", false, "print the version, commit and build date")
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the version, commit and build date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !asJSON {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), b)
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(b)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object: version, commit, date, go, platform")
	root.AddCommand(cmd)
}

// printVersion prints the --version line when root was asked for it.
func printVersion(cmd *cobra.Command) (bool, error) {
	if v, _ := cmd.Flags().GetBool("version"); !v {
		return false, nil
	}
	_, err := fmt.Fprintln(cmd.OutOrStdout(), currentBuild())
	return true, err
}
