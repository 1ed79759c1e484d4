// Command oracle evaluates CEL expressions in the real Kubernetes CEL
// environment (k8s.io/apiserver base environment, compatibility version
// 1.37) so that vpol's Python implementation of the Kubernetes libraries
// can be compared with it (tests/unit/cel/kubernetes/test_k8s_oracle.py).
//
// Input: one case per line, either an expression, or a JSON object
// {"expr": "...", "vars": {"name": value}} whose variables are declared dyn.
// Output: one JSON object per line with "value" (typed, see encode), or
// "error" (evaluation error), or "compile" (compile or program error).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/environment"
)

type outcome struct {
	Value   any    `json:"value,omitempty"`
	Error   string `json:"error,omitempty"`
	Compile string `json:"compile,omitempty"`
}

// encode turns a CEL value into JSON that keeps the CEL type of numbers.
func encode(v ref.Val) any {
	switch x := v.(type) {
	case types.Int:
		return map[string]any{"int": int64(x)}
	case types.Uint:
		return map[string]any{"uint": uint64(x)}
	case types.Double:
		return map[string]any{"double": fmt.Sprintf("%v", float64(x))}
	case types.String, types.Bool, types.Null:
		return x.Value()
	case types.Bytes:
		return map[string]any{"bytes": string(x)}
	case traits.Lister:
		out := []any{}
		for it := x.Iterator(); it.HasNext() == types.True; {
			out = append(out, encode(it.Next()))
		}
		return out
	case traits.Mapper:
		out := map[string]any{}
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			out[fmt.Sprint(k.Value())] = encode(x.Get(k))
		}
		return map[string]any{"map": out}
	}
	if o, ok := v.(*types.Optional); ok {
		if !o.HasValue() {
			return map[string]any{"optional": nil}
		}
		return map[string]any{"optional": encode(o.GetValue())}
	}
	return map[string]any{"opaque": v.Type().TypeName()}
}

// numbers turns json.Number into int64 when integral, else float64.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = numbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = numbers(x[k])
		}
	}
	return v
}

func run(base *cel.Env, line string) outcome {
	expr, vars, env := line, map[string]any{}, base
	if strings.HasPrefix(line, `{"expr"`) {
		var in struct {
			Expr string         `json:"expr"`
			Vars map[string]any `json:"vars"`
		}
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		if err := dec.Decode(&in); err != nil {
			return outcome{Compile: "bad input: " + err.Error()}
		}
		expr = in.Expr
		var opts []cel.EnvOption
		for name, v := range in.Vars {
			vars[name] = numbers(v)
			opts = append(opts, cel.Variable(name, cel.DynType))
		}
		var err error
		if env, err = base.Extend(opts...); err != nil {
			return outcome{Compile: "extend: " + err.Error()}
		}
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return outcome{Compile: iss.Err().Error()}
	}
	prg, err := env.Program(ast)
	if err != nil {
		return outcome{Compile: "program: " + err.Error()}
	}
	out, _, err := prg.Eval(vars)
	if err != nil {
		return outcome{Error: err.Error()}
	}
	return outcome{Value: encode(out)}
}

func main() {
	env, err := environment.MustBaseEnvSet(version.MajorMinor(1, 37)).Env(environment.StoredExpressions)
	if err != nil {
		panic(err)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if err := out.Encode(run(env, in.Text())); err != nil {
			panic(err)
		}
	}
}
