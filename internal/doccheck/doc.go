// Package doccheck holds the tests that keep the documents honest: every
// relative link in README.md, CHANGELOG.md and docs/*.md names a file that
// exists and, with a fragment, a heading in it; the README stays a front
// door. It has no code of its own.
package doccheck
