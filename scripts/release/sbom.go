package main

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
)

// A CycloneDX 1.5 JSON document, only the fields written here.
type cdxBOM struct {
	BOMFormat    string          `json:"bomFormat"`
	SpecVersion  string          `json:"specVersion"`
	Version      int             `json:"version"`
	Metadata     cdxMetadata     `json:"metadata"`
	Components   []cdxComponent  `json:"components"`
	Dependencies []cdxDependency `json:"dependencies"`
}

type cdxMetadata struct {
	Timestamp string       `json:"timestamp,omitempty"`
	Tools     cdxTools     `json:"tools"`
	Component cdxComponent `json:"component"`
}

type cdxTools struct {
	Components []cdxComponent `json:"components"`
}

type cdxComponent struct {
	BOMRef      string        `json:"bom-ref,omitempty"`
	Type        string        `json:"type"`
	Name        string        `json:"name"`
	Version     string        `json:"version,omitempty"`
	Description string        `json:"description,omitempty"`
	PURL        string        `json:"purl,omitempty"`
	Properties  []cdxProperty `json:"properties,omitempty"`
}

type cdxProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type cdxDependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn,omitempty"`
}

func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + version
}

// buildSBOM lists the modules linked into the binary, as its embedded build
// info records them (the linker's own list: nothing that is not linked in).
func buildSBOM(bi *buildinfo.BuildInfo, artifact, version, date string) cdxBOM {
	setting := map[string]string{}
	for _, s := range bi.Settings {
		setting[s.Key] = s.Value
	}
	if date == "" {
		date = setting["vcs.time"]
	}
	// The release's version: the build info's is "(devel)" for a build
	// from a checkout (the main module has no version of its own there).
	mainVersion := bi.Main.Version
	if version != "" {
		mainVersion = version
	}
	main := cdxComponent{
		BOMRef: purl(bi.Main.Path, mainVersion), Type: "application",
		Name: bi.Main.Path, Version: mainVersion, PURL: purl(bi.Main.Path, mainVersion),
	}
	main.Properties = append(main.Properties, cdxProperty{"go:version", bi.GoVersion})
	for _, k := range []string{"GOOS", "GOARCH", "GOAMD64", "GOARM64", "CGO_ENABLED", "-trimpath", "vcs.revision", "vcs.time", "vcs.modified"} {
		if v, ok := setting[k]; ok {
			main.Properties = append(main.Properties, cdxProperty{"go:build:" + k, v})
		}
	}
	if artifact != "" {
		main.Properties = append(main.Properties, cdxProperty{"autodiag:artifact", artifact})
	}
	doc := cdxBOM{
		BOMFormat: "CycloneDX", SpecVersion: "1.5", Version: 1,
		Metadata: cdxMetadata{
			Timestamp: date,
			Tools: cdxTools{Components: []cdxComponent{{
				Type: "application", Name: "autodiag scripts/release",
				Description: "from the binary's embedded Go build info (debug/buildinfo)",
			}}},
			Component: main,
		},
		Components: []cdxComponent{},
	}
	var refs []string
	for _, d := range bi.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		c := cdxComponent{
			BOMRef: purl(m.Path, m.Version), Type: "library",
			Name: m.Path, Version: m.Version, PURL: purl(m.Path, m.Version),
		}
		if m.Sum != "" {
			c.Properties = append(c.Properties, cdxProperty{"go:module:sum", m.Sum})
		}
		if d.Replace != nil {
			c.Properties = append(c.Properties, cdxProperty{"go:module:replaces", d.Path + "@" + d.Version})
		}
		doc.Components = append(doc.Components, c)
		refs = append(refs, c.BOMRef)
	}
	sort.Slice(doc.Components, func(i, j int) bool { return doc.Components[i].BOMRef < doc.Components[j].BOMRef })
	sort.Strings(refs)
	doc.Dependencies = []cdxDependency{{Ref: main.BOMRef, DependsOn: refs}}
	return doc
}

func writeSBOM(out, binary, artifact, version, date string) error {
	bi, err := buildinfo.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("sbom: %s: %w", binary, err)
	}
	return writeSBOMFrom(out, bi, artifact, version, date)
}

func writeSBOMFrom(out string, bi *debug.BuildInfo, artifact, version, date string) error {
	b, err := json.MarshalIndent(buildSBOM(bi, artifact, version, date), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}
