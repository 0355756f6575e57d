package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

const (
	maxErrors = 10 // errors reported per file; the rest are counted
	// maxNodes bounds the work of reading a file whose aliases refer to
	// aliases (a "billion laughs"): far more than 50,000 keys need.
	maxNodes = 4_000_000
)

// parser walks a decoded keys file and collects its errors.
type parser struct {
	file   string
	errs   []error
	more   int
	visits int
}

func (p *parser) errorf(line int, format string, args ...any) {
	if len(p.errs) == maxErrors {
		p.more++
		return
	}
	p.errs = append(p.errs, &FileError{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// err returns the collected errors, joined.
func (p *parser) err() error {
	errs := p.errs
	slices.SortStableFunc(errs, func(a, b error) int { return a.(*FileError).Line - b.(*FileError).Line })
	if p.more > 0 {
		errs = append(errs, &FileError{File: p.file, Msg: fmt.Sprintf("and %d more errors", p.more)})
	}
	return errors.Join(errs...)
}

// decode parses data as JSON or YAML into one node tree with line numbers.
func (p *parser) decode(isJSON bool, data []byte) (node *yaml.Node, err error) {
	if isJSON {
		return jsonNode(p.file, data)
	}
	// The YAML library is fuzzed, but a keys file arrives on every reload: a
	// panic in it must be a bad file, not a dead server.
	defer func() {
		if r := recover(); r != nil {
			node, err = nil, &FileError{File: p.file, Msg: "invalid YAML: the parser failed on this file"}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &FileError{File: p.file, Msg: "the file has no keys: list (only comments or blank lines)"}
		}
		return nil, yamlError(p.file, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, yamlError(p.file, err)
	default:
		return nil, &FileError{File: p.file, Line: next.Line, Msg: "a second YAML document starts here: a keys file is one document"}
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	return &doc, nil
}

// yamlError turns the YAML library's "yaml: line N: what" into a FileError.
func yamlError(file string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				line, msg = l, after
			}
		}
	}
	return &FileError{File: file, Line: line, Msg: "invalid YAML: " + redact(msg)}
}

// resolve follows aliases to the node they name, counting the work.
func (p *parser) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	p.visits++
	return n
}

// field is one value of a mapping, with the line of its key.
type field struct {
	line int
	val  *yaml.Node
}

// fields returns a mapping's fields, reporting keys not in known, repeated keys and
// keys that are not plain strings. what names the mapping in messages.
func (p *parser) fields(n *yaml.Node, what string, known ...string) map[string]field {
	out := make(map[string]field, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := p.resolve(n.Content[i]), p.resolve(n.Content[i+1])
		switch {
		case k == nil || k.Kind != yaml.ScalarNode:
			p.errorf(n.Content[i].Line, "%s: a field name must be a plain string", what)
		case k.Tag == "!!merge":
			p.errorf(k.Line, "%s: merge keys (<<) are not supported; repeat the fields", what)
		case !contains(known, k.Value):
			p.errorf(k.Line, "%s: unknown field %s (known: %s)", what, show(k.Value), strings.Join(known, ", "))
		default:
			if prev, dup := out[k.Value]; dup {
				p.errorf(k.Line, "%s: field %q is repeated (first at line %d)", what, k.Value, prev.line)
				continue
			}
			out[k.Value] = field{line: k.Line, val: v}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// str returns a scalar's text; ok is false, and the error reported, for anything
// else (a list, a mapping, null).
func (p *parser) str(f field, what string) (string, bool) {
	n := f.val
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(f.line, "%s must be a string", what)
		return "", false
	}
	return n.Value, true
}

// seq returns a sequence's items, aliases resolved; ok is false, and the error
// reported, for anything else.
func (p *parser) seq(f field, what string) ([]*yaml.Node, bool) {
	n := f.val
	if n == nil || n.Kind != yaml.SequenceNode {
		p.errorf(f.line, "%s must be a list", what)
		return nil, false
	}
	items := make([]*yaml.Node, 0, len(n.Content))
	for _, c := range n.Content {
		items = append(items, p.resolve(c))
	}
	return items, true
}
