// Package config is the only owner of the configuration: the types of
// every section of the file (the leaf packages' sections are embedded as
// their own types), the defaults (DefaultConfig), the strict YAML decode
// (schema.go), the AUTODIAG_* overrides (Env), Load and Validate, which
// report every problem at once naming its key and line (configerr.go),
// the check that no value placeholder lands inside an interpreter's
// program (catalogcheck.go), and the compile of the catalog into the task
// validator (catalog.go). The report: section is report.go.
//
// It may import the leaf packages whose sections it holds, never the
// agent root or its parts (worker, supervisor, hooks, launch,
// alert/listener), and no AWS SDK package.
package config
