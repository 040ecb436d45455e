package deploy

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Instruction is one Dockerfile instruction, continuation lines joined.
type Instruction struct {
	Line int    // where it starts, from 1
	Cmd  string // upper case: FROM, RUN, COPY, ...
	Args string // the rest, as written
}

// Stage is one build stage: its FROM and the instructions after it.
type Stage struct {
	From         Instruction
	Image, Name  string // the FROM image and its AS name
	Instructions []Instruction
}

// ParseDockerfile splits a Dockerfile into stages. It understands what
// this repository's Dockerfile uses: comments, parser directives,
// backslash continuations, ARGs before the first FROM; not heredocs or
// another escape character.
func ParseDockerfile(data string) (global []Instruction, stages []Stage, err error) {
	lines := strings.Split(data, "\n")
	for i := 0; i < len(lines); i++ {
		start := i + 1
		text := strings.TrimSpace(lines[i])
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		for strings.HasSuffix(text, "\\") && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				continue
			}
			text = strings.TrimSuffix(text, "\\") + " " + next
		}
		cmd, args, _ := strings.Cut(text, " ")
		in := Instruction{Line: start, Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)}
		if strings.Contains(in.Args, "<<") {
			return nil, nil, fmt.Errorf("line %d: heredocs are not supported", start)
		}
		if in.Cmd != "FROM" {
			if len(stages) == 0 {
				if in.Cmd != "ARG" {
					return nil, nil, fmt.Errorf("line %d: %s before the first FROM", start, in.Cmd)
				}
				global = append(global, in)
			} else {
				stages[len(stages)-1].Instructions = append(stages[len(stages)-1].Instructions, in)
			}
			continue
		}
		var words []string
		for _, w := range strings.Fields(in.Args) {
			if !strings.HasPrefix(w, "--") {
				words = append(words, w)
			}
		}
		st := Stage{From: in}
		switch {
		case len(words) == 1:
			st.Image = words[0]
		case len(words) == 3 && strings.EqualFold(words[1], "AS"):
			st.Image, st.Name = words[0], words[2]
		default:
			return nil, nil, fmt.Errorf("line %d: FROM %s: want an image and an optional AS name", start, in.Args)
		}
		stages = append(stages, st)
	}
	if len(stages) == 0 {
		return nil, nil, errors.New("no FROM")
	}
	return global, stages, nil
}

// Dockerignore is the list of patterns of a .dockerignore file.
type Dockerignore []string

// ParseDockerignore reads a .dockerignore. Exceptions ("!pattern") are
// refused: Excludes does not implement them.
func ParseDockerignore(data string) (Dockerignore, error) {
	var d Dockerignore
	for i, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			return nil, fmt.Errorf("line %d: exceptions (%s) are not supported", i+1, line)
		}
		d = append(d, path.Clean(strings.TrimPrefix(line, "/")))
	}
	return d, nil
}

// Excludes reports whether the build context leaves out rel (slash
// separated, relative to the context's root): a pattern matches it or one
// of its parent directories. Patterns are path.Match patterns per path
// element, and "**" matches any number of elements, as Docker's.
func (d Dockerignore) Excludes(rel string) bool {
	parts := strings.Split(path.Clean(rel), "/")
	for _, p := range d {
		pat := strings.Split(p, "/")
		for n := 1; n <= len(parts); n++ {
			if matchElems(pat, parts[:n]) {
				return true
			}
		}
	}
	return false
}

func matchElems(pat, parts []string) bool {
	if len(pat) == 0 {
		return len(parts) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(parts); i++ {
			if matchElems(pat[1:], parts[i:]) {
				return true
			}
		}
		return false
	}
	if len(parts) == 0 {
		return false
	}
	ok, err := path.Match(pat[0], parts[0])
	return err == nil && ok && matchElems(pat[1:], parts[1:])
}
