package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
)

// goreleaserConfig is the part of .goreleaser.yaml this program carries out,
// decoded strictly: a key it does not know fails the run with its name and
// line, so .goreleaser.yaml stays the one description of the release and
// this program never silently builds something else. Sections it leaves to
// GoReleaser are listed as yaml.Node and reported as skipped.
type goreleaserConfig struct {
	Version     int             `yaml:"version"`
	ProjectName string          `yaml:"project_name"`
	Dist        string          `yaml:"dist"`
	Builds      []buildConfig   `yaml:"builds"`
	Archives    []archiveConfig `yaml:"archives"`
	Checksum    checksumConfig  `yaml:"checksum"`
	Signs       []signConfig    `yaml:"signs"`
	SBOMs       []sbomConfig    `yaml:"sboms"`
	NFPMs       []nfpmConfig    `yaml:"nfpms"`

	// Left to GoReleaser (a tagged release); not built by a snapshot here.
	Dockers     yaml.Node `yaml:"dockers_v2"`
	ReportSizes yaml.Node `yaml:"report_sizes"`
	Changelog   yaml.Node `yaml:"changelog"`
	Release     yaml.Node `yaml:"release"`
}

type buildConfig struct {
	ID           string   `yaml:"id"`
	Main         string   `yaml:"main"`
	Binary       string   `yaml:"binary"`
	Env          []string `yaml:"env"`
	Goos         []string `yaml:"goos"`
	Goarch       []string `yaml:"goarch"`
	Flags        []string `yaml:"flags"`
	Ldflags      []string `yaml:"ldflags"`
	ModTimestamp string   `yaml:"mod_timestamp"`
}

type fileInfo struct {
	MTime string      `yaml:"mtime"`
	Owner string      `yaml:"owner"`
	Group string      `yaml:"group"`
	Mode  os.FileMode `yaml:"mode"`
}

type archiveConfig struct {
	ID           string   `yaml:"id"`
	IDs          []string `yaml:"ids"`
	Formats      []string `yaml:"formats"`
	NameTemplate string   `yaml:"name_template"`
	BuildsInfo   fileInfo `yaml:"builds_info"`
	Files        []struct {
		Src  string   `yaml:"src"`
		Info fileInfo `yaml:"info"`
	} `yaml:"files"`
}

type checksumConfig struct {
	NameTemplate string `yaml:"name_template"`
	Algorithm    string `yaml:"algorithm"`
}

type signConfig struct {
	ID        string   `yaml:"id"`
	Artifacts string   `yaml:"artifacts"`
	Signature string   `yaml:"signature"`
	Cmd       string   `yaml:"cmd"`
	Args      []string `yaml:"args"`
}

type sbomConfig struct {
	ID        string   `yaml:"id"`
	Artifacts string   `yaml:"artifacts"`
	Documents []string `yaml:"documents"`
	Cmd       string   `yaml:"cmd"`
	Args      []string `yaml:"args"`
}

type nfpmConfig struct {
	ID               string   `yaml:"id"`
	IDs              []string `yaml:"ids"`
	PackageName      string   `yaml:"package_name"`
	FileNameTemplate string   `yaml:"file_name_template"`
	Formats          []string `yaml:"formats"`
	Vendor           string   `yaml:"vendor"`
	Homepage         string   `yaml:"homepage"`
	Maintainer       string   `yaml:"maintainer"`
	Description      string   `yaml:"description"`
	License          string   `yaml:"license"`
	Section          string   `yaml:"section"`
	Bindir           string   `yaml:"bindir"`
	MTime            string   `yaml:"mtime"`
	Contents         []struct {
		Src      string   `yaml:"src"`
		Dst      string   `yaml:"dst"`
		Type     string   `yaml:"type"`
		FileInfo fileInfo `yaml:"file_info"`
	} `yaml:"contents"`
	Scripts struct {
		PreInstall  string `yaml:"preinstall"`
		PostInstall string `yaml:"postinstall"`
		PreRemove   string `yaml:"preremove"`
		PostRemove  string `yaml:"postremove"`
	} `yaml:"scripts"`
	Overrides map[string]struct {
		Dependencies []string `yaml:"dependencies"`
	} `yaml:"overrides"`
}

// The scripts the signs and sboms steps run: this program runs sign.sh
// itself and writes the SBOM that sbom.sh would (sbom.sh calls this program
// too), so a change of either command is a change this program must follow.
const (
	signScript = "packaging/release/sign.sh"
	sbomScript = "packaging/release/sbom.sh"
)

func loadConfig(path string) (*goreleaserConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var c goreleaserConfig
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w (scripts/release builds the snapshot from this file: teach it the new key, or leave the key to GoReleaser in goreleaserConfig)", path, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// check rejects what the snapshot build does not reproduce.
func (c *goreleaserConfig) check() error {
	if c.Version != 2 {
		return fmt.Errorf("version %d: want 2", c.Version)
	}
	if len(c.Builds) != 1 {
		return fmt.Errorf("builds: %d entries, this program builds exactly one", len(c.Builds))
	}
	if len(c.Archives) != 1 || len(c.Archives[0].Formats) != 1 || c.Archives[0].Formats[0] != "tar.gz" {
		return fmt.Errorf("archives: want one archive of format tar.gz")
	}
	if c.Checksum.Algorithm != "sha256" {
		return fmt.Errorf("checksum.algorithm %q: this program writes sha256", c.Checksum.Algorithm)
	}
	if len(c.Signs) != 1 || c.Signs[0].Artifacts != "checksum" || c.Signs[0].Cmd != "sh" ||
		len(c.Signs[0].Args) == 0 || c.Signs[0].Args[0] != signScript {
		return fmt.Errorf("signs: want one signature of the checksum file by sh %s", signScript)
	}
	for _, s := range c.SBOMs {
		if s.Cmd != "sh" || len(s.Args) == 0 || !strings.HasSuffix(s.Args[0], sbomScript) ||
			len(s.Documents) != 1 || s.Documents[0] != "{{ .ArtifactName }}.cdx.json" {
			return fmt.Errorf("sboms %s: want sh %s writing {{ .ArtifactName }}.cdx.json", s.ID, sbomScript)
		}
		if s.Artifacts != "archive" && s.Artifacts != "package" {
			return fmt.Errorf("sboms %s: artifacts %q, want archive or package", s.ID, s.Artifacts)
		}
	}
	if len(c.NFPMs) != 1 {
		return fmt.Errorf("nfpms: %d entries, this program builds exactly one", len(c.NFPMs))
	}
	for f := range c.NFPMs[0].Overrides {
		if !contains(c.NFPMs[0].Formats, f) {
			return fmt.Errorf("nfpms.overrides.%s: not one of the formats %v", f, c.NFPMs[0].Formats)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// vars are the GoReleaser template variables .goreleaser.yaml uses.
type vars struct {
	ProjectName          string
	Version              string
	Tag                  string
	FullCommit           string
	ShortCommit          string
	CommitDate           string
	CommitTimestamp      string
	IsSnapshot           bool
	Prerelease           string
	Os                   string
	Arch                 string
	ArtifactName         string
	ConventionalFileName string
}

// expand evaluates a GoReleaser template; an unknown variable is an error.
func expand(s string, v vars) (string, error) {
	t, err := template.New("").Option("missingkey=error").Parse(s)
	if err != nil {
		return "", fmt.Errorf("template %q: %w", s, err)
	}
	var b strings.Builder
	if err := t.Execute(&b, v); err != nil {
		return "", fmt.Errorf("template %q: %w", s, err)
	}
	return b.String(), nil
}
