// Command release builds autodiag's release artifacts as a snapshot, from
// .goreleaser.yaml, without GoReleaser: scripts/release-check runs it on
// every CI build, where building GoReleaser from source would cost more
// than the rest of the release check together (docs/RESULTS.md, Cold CI).
// Tagged releases are still made by GoReleaser from the same file.
//
//	release snapshot [-dist DIR] [-skip-sign] [-goarch LIST]  # in the repository's root
//	release build -dist DIR [-goarch LIST]  # the binaries only, no packages
//	release sbom -o DOC [-artifact NAME] [-version V] BINARY # its CycloneDX SBOM
//
// The snapshot: `go build` per platform with the build's flags, env and
// ldflags; tarballs (archive/tar, gzip) with the archive's files, each entry
// with the configured mtime, owner and mode; .deb and .rpm with the nfpm
// library GoReleaser itself uses, from the nfpms section; a CycloneDX SBOM
// per tarball and package from the binary's embedded build info;
// checksums.txt; its signature by packaging/release/sign.sh; metadata.json.
// -goarch limits both to some of the build's architectures: CI builds and
// packages the host's and only builds the others (scripts/release-check).
// It is tooling: a module of its own, never linked into the agent.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	// Interrupted, the go build and gpg it runs stop with it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "snapshot":
		fs := flag.NewFlagSet("snapshot", flag.ExitOnError)
		dist := fs.String("dist", "", "output directory (default: .goreleaser.yaml's dist)")
		skipSign := fs.Bool("skip-sign", false, "do not sign checksums.txt")
		config := fs.String("config", ".goreleaser.yaml", "GoReleaser configuration")
		goarch := fs.String("goarch", "", "comma-separated architectures to build and package (default: builds.goarch, all)")
		_ = fs.Parse(os.Args[2:])
		err = snapshot(ctx, *config, *dist, *skipSign, *goarch)
	case "build":
		fs := flag.NewFlagSet("build", flag.ExitOnError)
		dist := fs.String("dist", "", "output directory (required)")
		config := fs.String("config", ".goreleaser.yaml", "GoReleaser configuration")
		goarch := fs.String("goarch", "", "comma-separated architectures to build (default: builds.goarch, all)")
		_ = fs.Parse(os.Args[2:])
		if *dist == "" || fs.NArg() != 0 {
			usage()
		}
		err = buildOnly(ctx, *config, *dist, *goarch)
	case "sbom":
		fs := flag.NewFlagSet("sbom", flag.ExitOnError)
		out := fs.String("o", "", "output file")
		artifact := fs.String("artifact", "", "the archive or package the SBOM describes")
		version := fs.String("version", "", "the release's version (default: the build info's main module version)")
		date := fs.String("date", "", "RFC 3339 timestamp of the document (default: the binary's vcs.time)")
		_ = fs.Parse(os.Args[2:])
		if *out == "" || fs.NArg() != 1 {
			usage()
		}
		err = writeSBOM(*out, fs.Arg(0), *artifact, *version, *date)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		stop()
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: release snapshot [-dist DIR] [-skip-sign] [-goarch LIST] [-config FILE]\n       release build -dist DIR [-goarch LIST] [-config FILE]\n       release sbom -o DOC [-artifact NAME] [-version V] [-date RFC3339] BINARY")
	os.Exit(2)
}
