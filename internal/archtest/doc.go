// Package archtest holds tests of the code's shape that no one package
// owns: how many methods a type may have. It has no code of its own.
package archtest
