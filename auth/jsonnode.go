package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxJSONDepth bounds nesting: a keys file needs five levels.
const maxJSONDepth = 32

// jsonReader turns JSON into the node tree the YAML parser makes, with the line
// of every value, so that one validator serves both formats and JSON errors name
// lines too. (Parsing JSON as YAML would mostly work, but not for tab-indented
// JSON, and its error messages would speak YAML.)
type jsonReader struct {
	file     string
	data     []byte
	dec      *json.Decoder
	newlines []int // offsets of '\n'
}

// jsonNode parses data, one JSON value, into nodes.
func jsonNode(file string, data []byte) (*yaml.Node, error) {
	j := &jsonReader{file: file, data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	j.dec.UseNumber()
	for i, c := range data {
		if c == '\n' {
			j.newlines = append(j.newlines, i)
		}
	}
	tok, line, err := j.next()
	if err != nil {
		return nil, err
	}
	n, err := j.node(tok, line, 0)
	if err != nil {
		return nil, err
	}
	if _, line, err := j.next(); err == nil {
		return nil, &FileError{File: file, Line: line, Msg: "invalid JSON: more data after the top-level value"}
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	return n, nil
}

// line returns the 1-based line of a byte offset.
func (j *jsonReader) line(off int) int {
	return sort.SearchInts(j.newlines, off) + 1
}

// next returns the next token and the line it starts on. At the end of the
// input it returns an error matching io.EOF.
func (j *jsonReader) next() (json.Token, int, error) {
	start := int(j.dec.InputOffset())
	for start < len(j.data) && strings.IndexByte(" \t\r\n:,", j.data[start]) >= 0 {
		start++
	}
	tok, err := j.dec.Token()
	if err == io.EOF {
		return nil, j.line(start), err
	}
	if err != nil {
		off := start
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = int(se.Offset)
		}
		msg := err.Error()
		if errors.Is(err, io.ErrUnexpectedEOF) {
			msg = "the file ends inside a value"
		}
		return nil, 0, &FileError{File: j.file, Line: j.line(max(off-1, 0)), Msg: "invalid JSON: " + redact(msg)}
	}
	return tok, j.line(start), nil
}

// node converts the value that starts with tok, reading the rest of it.
func (j *jsonReader) node(tok json.Token, line, depth int) (*yaml.Node, error) {
	if depth > maxJSONDepth {
		return nil, &FileError{File: j.file, Line: line, Msg: "invalid JSON: nested too deeply for a keys file"}
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: line}
		if t == '{' {
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
		}
		for {
			tok, tline, err := j.next()
			if err != nil {
				return nil, unexpectedEnd(j, err)
			}
			if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
				return n, nil
			}
			c, err := j.node(tok, tline, depth+1)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, c)
		}
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t, Line: line}, nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(t), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(t), Line: line}, nil
	case bool:
		v := "false"
		if t {
			v = "true"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: v, Line: line}, nil
	default: // nil: JSON null
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null", Line: line}, nil
	}
}

// unexpectedEnd turns an end of input inside a value into a syntax error.
func unexpectedEnd(j *jsonReader, err error) error {
	if errors.Is(err, io.EOF) {
		return &FileError{File: j.file, Line: j.line(len(j.data)), Msg: "invalid JSON: the file ends inside a value"}
	}
	return err
}
