"""The type stub growformer/__init__.pyi against the module, both ways: the same public names,
the same members of each class (properties as properties), the same parameters of each function
and method; and a docstring on every public class, function, method and property."""
import ast
import builtins
import inspect
import os
import re

import growformer as gf

STUB = os.path.join(os.path.dirname(gf.__file__), "__init__.pyi")


def public(name):
    return not name.startswith("_")


def stub_tree():
    with open(STUB) as f:
        return ast.parse(f.read(), STUB)


def stub_names(body):
    """{name: node} of the public definitions in BODY (classes, functions, assignments)."""
    out = {}
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node
    return {k: v for k, v in out.items() if public(k)}


def stub_params(fn):
    """A stub function's parameter names, without self, in order (*args as *NAME, ** as **NAME)."""
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return [n for n in names if n != "self"]


def runtime_params(obj):
    """The parameter names of a function, method or pybind11 builtin, without self."""
    try:
        sig = inspect.signature(obj)
        names = []
        for p in sig.parameters.values():
            prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
            names.append(prefix + p.name)
        return [n for n in names if n != "self"]
    except (TypeError, ValueError):
        pass
    # pybind11: the docstring's first line is "name(a: T, b: T = default) -> R"
    first = obj.__doc__.strip().splitlines()[0]
    inner = first[first.index("(") + 1:first.rindex(")")]
    names, depth, token = [], 0, ""
    for ch in inner + ",":
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            if token.strip():
                names.append(token.split(":")[0].split("=")[0].strip())
            token = ""
        else:
            token += ch
    return [n for n in names if n != "self"]


def doc_text(obj):
    """OBJ's docstring without pybind11's signature lines."""
    lines = (inspect.getdoc(obj) or "").splitlines()
    text = [l for l in lines if not re.match(r"^\w+\(.*\)( -> .*)?$", l)]
    return "\n".join(text).strip()


def test_the_stub_names_what_the_module_has_and_nothing_else():
    names = stub_names(stub_tree().body)
    module = {n for n in dir(gf) if public(n)}
    assert set(names) - {"__all__"} == module, (set(names) ^ module)
    assert set(gf.__all__) == module


def test_each_class_has_the_stub_members_and_bases():
    for name, node in stub_names(stub_tree().body).items():
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(gf, name)
        assert inspect.isclass(cls), name
        for base in node.bases:
            assert issubclass(cls, getattr(builtins, base.id)), (name, base.id)
        members = {n: m for n, m in stub_names(node.body).items()}
        runtime = {n for n in vars(cls) if public(n)}
        assert set(members) == runtime, (name, set(members) ^ runtime)
        for m, fn in members.items():
            is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)
            assert isinstance(vars(cls)[m], property) == is_property, (name, m)
            if not is_property:
                assert stub_params(fn) == runtime_params(getattr(cls, m)), (name, m)
        init = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
        if init:
            assert stub_params(init[0]) == runtime_params(cls.__init__), name


def test_each_function_has_the_stub_parameters():
    for name, node in stub_names(stub_tree().body).items():
        if isinstance(node, ast.FunctionDef):
            assert stub_params(node) == runtime_params(getattr(gf, name)), name


def test_every_public_class_function_method_and_property_has_a_docstring():
    missing = []
    assert doc_text(gf) and doc_text(gf._core)
    for name in gf.__all__:
        obj = getattr(gf, name)
        if not doc_text(obj):
            missing.append(name)
        if inspect.isclass(obj):
            for m, member in vars(obj).items():
                if public(m) and not doc_text(member):
                    missing.append(f"{name}.{m}")
            if "__init__" in vars(obj) and name == "Experiment" and not doc_text(obj.__init__):
                missing.append(f"{name}.__init__")
    assert not missing, missing
    # train's docstring names the keys of the result (test_api checks the result has them),
    # and resume's refers to it
    result = gf.Experiment.train.__doc__.split("The result")[1]
    for key in ("status", "run_dir", "finished", "stopped_at", "best_val", "test", "loss",
                "accuracy", "examples", "majority_class_accuracy", "model", "evaluated_on",
                "heads", "growth_summary", "pruning_summary"):
        assert re.search(rf"\b{key}\b", result), key
    assert "result dict of Experiment.train" in gf.resume.__doc__
