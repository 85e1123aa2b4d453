package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "release: "+format+"\n", a...)
}

func git(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = strings.TrimSpace(string(ee.Stderr))
		}
		return "", fmt.Errorf("git %s: %w %s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}

// snapshotVars: GoReleaser's snapshot naming, {{ .Version }} being the last
// tag (v0.0.0 without one) with -SNAPSHOT-<short commit> after it.
func snapshotVars(ctx context.Context, project string) (vars, error) {
	v := vars{ProjectName: project, IsSnapshot: true}
	var err error
	if v.FullCommit, err = git(ctx, "rev-parse", "HEAD"); err != nil {
		return v, err
	}
	// A fixed length, not `git rev-parse --short`: git sizes the
	// abbreviation by the repository's object count, so a fresh clone (7
	// digits) and a long-lived checkout (8) named the same commit's
	// artifacts differently, and release-check's two-clone comparison
	// found no file to compare (CI, stop 52).
	v.ShortCommit = shortCommit(v.FullCommit)
	ts, err := git(ctx, "log", "-1", "--format=%ct", "HEAD")
	if err != nil {
		return v, err
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return v, fmt.Errorf("commit time %q: %w", ts, err)
	}
	v.CommitTimestamp = ts
	v.CommitDate = time.Unix(sec, 0).UTC().Format(time.RFC3339)
	v.Tag, err = git(ctx, "describe", "--tags", "--abbrev=0")
	if err != nil {
		v.Tag = "v0.0.0"
	}
	v.Version = strings.TrimPrefix(v.Tag, "v") + "-SNAPSHOT-" + v.ShortCommit
	v.Prerelease = "SNAPSHOT-" + v.ShortCommit
	return v, nil
}

// shortCommitLen: the snapshot's commit abbreviation, the same in every
// clone of the commit.
const shortCommitLen = 8

func shortCommit(full string) string {
	if len(full) > shortCommitLen {
		return full[:shortCommitLen]
	}
	return full
}

type built struct {
	goos, goarch, path string
}

type artifact struct {
	path   string
	binary built
}

// selectGoarch returns the architectures of list (comma-separated), each
// one of the build's goarch, in the build's order; all of them when list
// is empty. A name the build does not have is an error that names it.
func selectGoarch(build []string, list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return build, nil
	}
	want := map[string]bool{}
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if !slices.Contains(build, a) {
			return nil, fmt.Errorf("-goarch %q: %q is not one of builds.goarch %v", list, a, build)
		}
		want[a] = true
	}
	var out []string
	for _, a := range build {
		if want[a] {
			out = append(out, a)
		}
	}
	return out, nil
}

// buildOnly builds the binaries of the listed architectures (all when
// goarch is empty) exactly as snapshot does, into dist/<id>_<os>_<arch>/,
// and packages nothing: an architecture whose packaging CI leaves to the
// tagged release is still proven to compile and link, and its size
// checked.
func buildOnly(ctx context.Context, configPath, dist, goarch string) error {
	c, err := loadConfig(configPath)
	if err != nil {
		return err
	}
	b := c.Builds[0]
	if b.Goarch, err = selectGoarch(b.Goarch, goarch); err != nil {
		return err
	}
	v, err := snapshotVars(ctx, c.ProjectName)
	if err != nil {
		return err
	}
	_, err = buildAll(ctx, b, v, dist)
	return err
}

func snapshot(ctx context.Context, configPath, dist string, skipSign bool, goarch string) error {
	c, err := loadConfig(configPath)
	if err != nil {
		return err
	}
	if c.Builds[0].Goarch, err = selectGoarch(c.Builds[0].Goarch, goarch); err != nil {
		return err
	}
	if dist == "" {
		dist = c.Dist
	}
	v, err := snapshotVars(ctx, c.ProjectName)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dist); err != nil {
		return err
	}
	if err := os.MkdirAll(dist, 0o755); err != nil {
		return err
	}
	logf("snapshot %s at %s (commit date %s) into %s", v.Version, v.FullCommit, v.CommitDate, dist)
	logf("skipped, left to GoReleaser for a tagged release: dockers_v2 (the image), changelog, release (publish), report_sizes")

	bins, err := buildAll(ctx, c.Builds[0], v, dist)
	if err != nil {
		return err
	}
	var archives, packages []artifact
	for _, b := range bins {
		a, err := writeTarball(c.Archives[0], b, v, dist)
		if err != nil {
			return err
		}
		archives = append(archives, artifact{a, b})
	}
	for _, format := range c.NFPMs[0].Formats {
		for _, b := range bins {
			p, err := writePackage(c.NFPMs[0], c.Builds[0].Binary, format, b, v, dist)
			if err != nil {
				return err
			}
			packages = append(packages, artifact{p, b})
		}
	}
	var sums []string
	for _, a := range append(append([]artifact{}, archives...), packages...) {
		sums = append(sums, a.path)
	}
	for _, s := range c.SBOMs {
		list := archives
		if s.Artifacts == "package" {
			list = packages
		}
		for _, a := range list {
			doc := a.path + ".cdx.json"
			if err := writeSBOM(doc, a.binary.path, filepath.Base(a.path), v.Version, v.CommitDate); err != nil {
				return err
			}
			sums = append(sums, doc)
		}
	}
	checksums := filepath.Join(dist, c.Checksum.NameTemplate)
	if err := writeChecksums(checksums, sums); err != nil {
		return err
	}
	if skipSign {
		logf("signs: skipped (-skip-sign)")
	} else {
		sig, err := expand(strings.ReplaceAll(c.Signs[0].Signature, "${artifact}", checksums), v)
		if err != nil {
			return err
		}
		args := append([]string{}, c.Signs[0].Args...)
		for i, a := range args {
			a = strings.ReplaceAll(a, "${signature}", sig)
			a = strings.ReplaceAll(a, "${artifact}", checksums)
			if args[i], err = expand(a, v); err != nil {
				return err
			}
		}
		cmd := exec.CommandContext(ctx, c.Signs[0].Cmd, args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("signs: %s %s: %w", c.Signs[0].Cmd, strings.Join(args, " "), err)
		}
	}
	meta, _ := json.MarshalIndent(map[string]any{
		"project_name": v.ProjectName, "tag": v.Tag, "version": v.Version,
		"commit": v.FullCommit, "date": v.CommitDate, "snapshot": true,
	}, "", "  ")
	if err := os.WriteFile(filepath.Join(dist, "metadata.json"), append(meta, '\n'), 0o644); err != nil {
		return err
	}
	logf("done: %d archives, %d packages, %d SBOMs, %s", len(archives), len(packages), len(sums)-len(archives)-len(packages), filepath.Base(checksums))
	return nil
}

func buildAll(ctx context.Context, b buildConfig, v vars, dist string) ([]built, error) {
	var ldflags []string
	for _, l := range b.Ldflags {
		s, err := expand(l, v)
		if err != nil {
			return nil, fmt.Errorf("builds.ldflags: %w", err)
		}
		ldflags = append(ldflags, s)
	}
	var mtime time.Time
	if b.ModTimestamp != "" {
		s, err := expand(b.ModTimestamp, v)
		if err != nil {
			return nil, err
		}
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("builds.mod_timestamp %q: %w", s, err)
		}
		mtime = time.Unix(sec, 0)
	}
	var out []built
	for _, goos := range b.Goos {
		for _, goarch := range b.Goarch {
			dir := filepath.Join(dist, fmt.Sprintf("%s_%s_%s", b.ID, goos, goarch))
			path := filepath.Join(dir, b.Binary)
			args := append([]string{"build"}, b.Flags...)
			args = append(args, "-ldflags="+strings.Join(ldflags, " "), "-o", path, b.Main)
			cmd := exec.CommandContext(ctx, "go", args...)
			cmd.Env = append(append(os.Environ(), b.Env...), "GOOS="+goos, "GOARCH="+goarch)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			start := time.Now()
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("GOOS=%s GOARCH=%s go %s: %w", goos, goarch, strings.Join(args, " "), err)
			}
			if !mtime.IsZero() {
				if err := os.Chtimes(path, mtime, mtime); err != nil {
					return nil, err
				}
			}
			logf("built %s (%s/%s) in %.0fs", path, goos, goarch, time.Since(start).Seconds())
			out = append(out, built{goos, goarch, path})
		}
	}
	return out, nil
}

func parseTime(field, tmpl string, v vars) (time.Time, error) {
	s, err := expand(tmpl, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", field, err)
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: %w", field, s, err)
	}
	return t, nil
}

// writeTarball: the binary, then the archive's files in their order (a
// glob's matches sorted), each entry with the configured mtime, owner and
// mode, so that two clones of a
// commit write the same bytes (gzip's header carries no time or name).
func writeTarball(a archiveConfig, b built, v vars, dist string) (string, error) {
	v.Os, v.Arch = b.goos, b.goarch
	name, err := expand(a.NameTemplate, v)
	if err != nil {
		return "", fmt.Errorf("archives.name_template: %w", err)
	}
	path := filepath.Join(dist, name+".tar.gz")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	gz, err := gzip.NewWriterLevel(f, gzip.DefaultCompression)
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(gz)
	add := func(src, dst string, info fileInfo) error {
		mtime, err := parseTime("archives mtime", info.MTime, v)
		if err != nil {
			return err
		}
		body, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		hdr := &tar.Header{
			Typeflag: tar.TypeReg, Name: dst, Size: int64(len(body)), Mode: int64(info.Mode.Perm()),
			ModTime: mtime, Uname: info.Owner, Gname: info.Group, Format: tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %s: %w", path, dst, err)
		}
		_, err = tw.Write(body)
		return err
	}
	if err := add(b.path, filepath.Base(b.path), a.BuildsInfo); err != nil {
		return "", err
	}
	for _, file := range a.Files {
		// A src is a glob, as in GoReleaser: each match goes under its own
		// path, in sorted order; one that matches nothing is an error.
		matches, err := filepath.Glob(file.Src)
		if err != nil {
			return "", fmt.Errorf("archives.files %q: %w", file.Src, err)
		}
		if len(matches) == 0 {
			return "", fmt.Errorf("archives.files %q matches no file", file.Src)
		}
		for _, m := range matches {
			if err := add(m, filepath.ToSlash(m), file.Info); err != nil {
				return "", err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	return path, f.Close()
}

// writePackage builds one .deb or .rpm with nfpm, as GoReleaser's nfpms
// step fills nfpm's Info: the binary into bindir, then the contents.
func writePackage(n nfpmConfig, binary, format string, b built, v vars, dist string) (string, error) {
	mtime, err := parseTime("nfpms.mtime", n.MTime, v)
	if err != nil {
		return "", err
	}
	contents := files.Contents{{
		Source: b.path, Destination: filepath.Join(n.Bindir, binary),
		FileInfo: &files.ContentFileInfo{Mode: 0o755, MTime: mtime},
	}}
	for _, c := range n.Contents {
		fi := &files.ContentFileInfo{Owner: c.FileInfo.Owner, Group: c.FileInfo.Group, Mode: c.FileInfo.Mode, MTime: mtime}
		contents = append(contents, &files.Content{Source: c.Src, Destination: c.Dst, Type: c.Type, FileInfo: fi})
	}
	info := &nfpm.Info{
		Name: n.PackageName, Arch: b.goarch, Platform: b.goos, Version: v.Version,
		Section: n.Section, Maintainer: n.Maintainer, Description: n.Description,
		Vendor: n.Vendor, Homepage: n.Homepage, License: n.License, MTime: mtime,
		Overridables: nfpm.Overridables{
			Depends:  n.Overrides[format].Dependencies,
			Contents: contents,
			Scripts: nfpm.Scripts{
				PreInstall: n.Scripts.PreInstall, PostInstall: n.Scripts.PostInstall,
				PreRemove: n.Scripts.PreRemove, PostRemove: n.Scripts.PostRemove,
			},
		},
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", fmt.Errorf("nfpms %s %s: %w", format, b.goarch, err)
	}
	pkg, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	v.Os, v.Arch = b.goos, b.goarch
	v.ConventionalFileName = pkg.ConventionalFileName(info)
	name, err := expand(n.FileNameTemplate, v)
	if err != nil {
		return "", fmt.Errorf("nfpms.file_name_template: %w", err)
	}
	path := filepath.Join(dist, name)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := pkg.Package(info, f); err != nil {
		return "", fmt.Errorf("nfpms %s: %w", name, err)
	}
	return path, f.Close()
}

func writeChecksums(out string, paths []string) error {
	sort.Slice(paths, func(i, j int) bool { return filepath.Base(paths[i]) < filepath.Base(paths[j]) })
	var b strings.Builder
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%x  %s\n", h.Sum(nil), filepath.Base(p))
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}
