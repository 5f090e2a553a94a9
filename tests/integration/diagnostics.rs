//! Malformed inputs: each must be refused with a diagnostic at the right line and column and
//! a message saying what is wrong. In each case `$` marks where the diagnostic must point; it
//! is removed before the source is checked.

use metafork::frontend::check_source;

/// Check `src` (with one `$` marker) and assert the first diagnostic's position and message.
fn refused(src: &str, message: &str) {
    let at = src.find('$').expect("test source has a `$` marker");
    let clean = src.replacen('$', "", 1);
    let before = &clean[..at];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap().chars().count() + 1;
    let err = match check_source("case.mf", &clean) {
        Ok(_) => panic!("accepted, but should fail with `{message}`:\n{clean}"),
        Err(e) => e,
    };
    let (l, c, m) = err.positions().remove(0);
    assert!(m.contains(message), "message `{m}` does not contain `{message}`\n{}", err.render(false));
    assert_eq!((l, c), (line, col), "wrong position for `{m}`\n{}", err.render(false));
    let rendered = err.render(false);
    assert!(rendered.contains(&format!("case.mf:{line}:{col}")), "render lacks file:line:col:\n{rendered}");
}

/// A valid kernel with `body` as the innermost statement(s).
fn kernel(body: &str) -> String {
    format!(
        "void f(int N, int B, float alpha, const float a[N], float c[N]) {{\n  meta_schedule {{\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        int k = i * B + j;\n{body}\n      }}\n  }}\n}}\n"
    )
}

#[test]
fn the_template_itself_is_valid() {
    check_source("ok.mf", &kernel("        c[k] = a[k];")).unwrap();
}

// ---- the language page's refused list ----

#[test]
fn pointer_parameter() {
    refused("void f(int N, float $*a) { }", "pointers are not supported");
}

#[test]
fn pointer_dereference() {
    refused(&kernel("        c[k] = $*a;"), "pointer dereference is not supported");
}

#[test]
fn address_of() {
    refused(&kernel("        c[k] = $&a[k];"), "taking an address is not supported");
}

#[test]
fn while_loop() {
    refused(&kernel("        $while (k < N) c[k] = 0;"), "`while` and `do` loops are not supported");
}

#[test]
fn do_loop() {
    refused(&kernel("        $do c[k] = 0;"), "`while` and `do` loops are not supported");
}

#[test]
fn goto_statement() {
    refused(&kernel("        $goto end;"), "`goto` is not supported");
}

#[test]
fn switch_statement() {
    refused(&kernel("        $switch (k) { }"), "`switch` is not supported");
}

#[test]
fn call_to_unknown_function() {
    refused(&kernel("        c[k] = $foo(a[k]);"), "call to unknown function `foo`");
}

#[test]
fn recursion() {
    refused(&kernel("        c[k] = $f(N);"), "calls between kernel functions (and recursion) are not supported");
}

#[test]
fn writing_a_scalar_parameter() {
    refused(&kernel("        $N = 3;"), "cannot assign to parameter `N`");
}

#[test]
fn writing_a_const_array() {
    refused(&kernel("        $a[k] = 1.0;"), "cannot write to `a`: it is declared `const`");
}

#[test]
fn writing_a_loop_counter() {
    refused(&kernel("        $j += 1;"), "cannot assign to loop counter `j`");
}

#[test]
fn meta_for_outside_a_schedule() {
    refused(
        "void f(int N, int B, float c[N]) {\n  $meta_for (int i = 0; i < N; i++) c[i] = 0;\n}\n",
        "`meta_for` outside a `meta_schedule`",
    );
}

#[test]
fn four_grid_dimensions() {
    refused(
        "void f(int N, int B, float c[N][N][N]) {\n  meta_schedule {\n    meta_for (int a = 0; a < N; a++)\n    meta_for (int b = 0; b < N; b++)\n    meta_for (int d = 0; d < N; d++)\n    meta_for (int $e = 0; e < N; e++)\n      for (int t = 0; t < 2; t++)\n        meta_for (int x = 0; x < B; x++)\n          c[a][b][d] = 0;\n  }\n}\n",
        "more than three grid dimensions",
    );
}

#[test]
fn four_block_dimensions() {
    refused(
        "void f(int N, int B, float c[N]) {\n  meta_schedule {\n    meta_for (int g = 0; g < N / B; g++)\n      for (int t = 0; t < 1; t++)\n        meta_for (int a = 0; a < B; a++)\n        meta_for (int b = 0; b < B; b++)\n        meta_for (int d = 0; d < B; d++)\n        meta_for (int $e = 0; e < B; e++)\n          c[g] = 0;\n  }\n}\n",
        "more than three thread-block dimensions",
    );
}

#[test]
fn too_few_subscripts() {
    refused(
        "void f(int N, int B, float c[N][N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++)\n        $c[i] = 0;\n  }\n}\n",
        "`c` has 2 dimensions but is indexed with 1 subscript",
    );
}

#[test]
fn too_many_subscripts() {
    refused(&kernel("        c[k] = $a[k][k];"), "`a` has 1 dimension but is indexed with 2 subscripts");
}

#[test]
fn unknown_identifier() {
    refused(&kernel("        c[k] = a[k] * $beta;"), "unknown identifier `beta`");
}

#[test]
fn unknown_array() {
    refused(&kernel("        c[k] = $d[k];"), "unknown identifier `d`");
}

#[test]
fn remainder_of_a_float() {
    refused(&kernel("        c[k] = $a[k] % 2;"), "invalid operands to `%`");
}

#[test]
fn floating_subscript() {
    refused(&kernel("        c[k] = a[$alpha];"), "array subscript is not an integer");
}

#[test]
fn array_used_as_a_value() {
    refused(&kernel("        c[k] = $a + 1;"), "array `a` used as a value");
}

#[test]
fn assigning_a_whole_array() {
    refused(&kernel("        $c = 0;"), "cannot assign to array `c` as a whole");
}

#[test]
fn indexing_a_scalar() {
    refused(&kernel("        c[k] = $N[0];"), "`N` is not an array");
}

// ---- lexer and parser ----

#[test]
fn missing_semicolon() {
    refused(&kernel("        c[k] = a[k]$\n        c[k] = 0;"), "expected `;` after the assignment");
}

#[test]
fn unexpected_character() {
    refused(&kernel("        c[k] = a[k] $@ 2;"), "unexpected character `@`");
}

#[test]
fn unterminated_comment() {
    refused("void f(int N) {\n  $/* never closed\n}\n", "unterminated comment");
}

#[test]
fn unclosed_block() {
    refused("void f(int N, float c[N]) ${\n  assume(N > 0);\n", "unclosed block");
}

#[test]
fn missing_closing_parenthesis() {
    refused(&kernel("        c[k] = (a[k] + 1$;"), "expected `)` to close the parenthesis");
}

#[test]
fn non_void_function() {
    refused("$int f(int N) { }", "kernel functions must return `void`");
}

#[test]
fn empty_file() {
    refused("$", "no kernel function in this file");
}

#[test]
fn string_literal() {
    refused(&kernel("        c[k] = $\"x\";"), "string and character literals");
    refused(&kernel("        c[k] = $'x';"), "string and character literals");
}

/// C23's digit separator is named as such, not taken for a character literal.
#[test]
fn digit_separator() {
    refused(&kernel("        c[k] = 1$'000;"), "digit separators (`1'000`, C23)");
    refused(&kernel("        c[k] = 0x1$'0L;"), "digit separators");
}

#[test]
fn bitwise_operator() {
    refused(&kernel("        int m = k $<< 2;"), "bitwise operator `<<`");
}

#[test]
fn meta_for_with_a_step_other_than_one() {
    refused(
        "void f(int N, int B, float c[N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N; i += $2)\n      c[i] = 0;\n  }\n}\n",
        "`meta_for` loops must step by 1",
    );
}

#[test]
fn for_loop_counting_down() {
    refused(&kernel("        for (int t = N; t $> 0; t++) c[k] = 0;"), "expected `<` or `<=` in the loop condition");
}

#[test]
fn declaration_without_initializer() {
    refused(&kernel("        int m$;"), "declarations must have an initializer");
}

#[test]
fn local_array() {
    refused(&kernel("        float t[$N];"), "per-thread array `t` needs a constant extent; `N` is not one");
}

#[test]
fn integer_literal_too_large() {
    refused(&kernel("        c[k] = $123456789012345678901234567890;"), "integer literal too large");
}

// ---- structure and placement ----

#[test]
fn if_around_a_schedule() {
    refused(
        "void f(int N, int B, float c[N]) {\n  $if (N > 2) {\n    meta_schedule {\n      meta_for (int i = 0; i < N / B; i++)\n        meta_for (int j = 0; j < B; j++)\n          c[i] = 0;\n    }\n  }\n}\n",
        "an `if` around a `meta_schedule` is not supported",
    );
}

#[test]
fn function_without_a_schedule() {
    refused("void $f(int N) {\n  assume(N > 0);\n}\n", "has no `meta_schedule`");
}

#[test]
fn nested_meta_for_in_the_body() {
    refused(
        &kernel("        for (int t = 0; t < 2; t++)\n          $meta_for (int z = 0; z < 2; z++) c[k] = 0;"),
        "`meta_for` loops must be perfectly nested",
    );
}

#[test]
fn schedule_body_without_meta_for() {
    refused("void f(int N, float c[N]) {\n  meta_schedule {\n    $c[0] = 1;\n  }\n}\n", "must be a nest of `meta_for` loops");
}

#[test]
fn assume_inside_a_kernel() {
    refused(&kernel("        $assume(N > 2);"), "must appear outside the `meta_schedule`");
}

#[test]
fn cache_of_a_scalar() {
    refused(
        "void f(int N, int B, float c[N]) {\n  meta_schedule cache($N) {\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++)\n        c[i] = 0;\n  }\n}\n",
        "`N` is not an array",
    );
}

#[test]
fn floating_value_in_a_fact() {
    refused("void f(int N, float alpha, float c[N]) {\n  assume($alpha > 0);\n}\n", "`alpha` is a floating value, not a parameter");
}

#[test]
fn extent_using_a_later_parameter() {
    refused("void f(float a[$N], int N) { }", "`N` must be declared before the array");
}

#[test]
fn non_polynomial_extent() {
    refused("void f(int N, float a[$N / 2]) { }", "array extents must be polynomials");
}

#[test]
fn redefinition_in_one_scope() {
    refused(&kernel("        int m = 1;\n        int $m = 2;"), "`m` is already defined in this scope");
}

#[test]
fn group_without_a_block_loop() {
    refused(
        "void f(int N, float c[N]) {\n  meta_schedule {\n    meta_for (int $i = 0; i < N; i++)\n      c[i] = 0;\n  }\n}\n",
        "cannot tell which `meta_for` loops form the thread block",
    );
}

#[test]
fn diagnostics_render_at_awkward_places() {
    // End of file, a span on a line end, and non-ASCII text must all render, not panic.
    for src in ["", "void", "void f(", "void f(int N) {\n", "void f(int \u{e9}\u{e9}) {}", "\u{e9}", "void f(int N) { /* \u{e9}"] {
        if let Err(e) = check_source("edge.mf", src) {
            assert!(e.render(false).contains("edge.mf:"), "{src:?}");
            assert!(!e.render(true).is_empty());
        }
    }
}

#[test]
fn wrong_arity_of_a_math_function() {
    refused(&kernel("        c[k] = $min(a[k]);"), "`min` takes 2 arguments, found 1");
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    let deep = format!("c[k] = {}a[k]{};", "(".repeat(5000), ")".repeat(5000));
    let src = kernel(&format!("        {deep}"));
    let err = check_source("deep.mf", &src).unwrap_err();
    assert!(err.positions()[0].2.contains("nesting deeper than"), "{}", err.render(false));
    let chain = format!("c[k] = a[k]{};", " + a[k]".repeat(20000));
    let err = check_source("chain.mf", &kernel(&format!("        {chain}"))).unwrap_err();
    assert!(err.positions()[0].2.contains("expression of more than 2048 chained operators"), "{}", err.render(false));
    assert!(err.render(false).contains("split it into partial sums held in locals"), "{}", err.render(false));
}

#[test]
fn a_long_flat_sum_is_not_nesting() {
    // 120 and 1000 terms: a stencil or a generated expression, not deep nesting.
    for n in [120, 1000] {
        let sum = format!("c[k] = a[k]{};", " + a[k]".repeat(n - 1));
        let program = check_source("sum.mf", &kernel(&format!("        {sum}"))).unwrap_or_else(|e| panic!("{n} terms: {}", e.render(false)));
        assert_eq!(program.kernels.len(), 1);
    }
}

/// A grid loop's bounds size the launch, so the host must know them: an enclosing grid loop's
/// counter there (a triangular grid) made `gen` write a kernel launch naming a variable the
/// host does not have, which nvcc rejected. Bounds affine in the counter are now bounded by
/// the tool (the square of the triangle, the body guarded: `tests/integration/triangles.rs`);
/// the others are refused at the bound.
#[test]
fn grid_bound_using_an_enclosing_grid_counter() {
    let nest = |lo: &str, hi: &str| format!("void f(int N, int B, float a[N][N]) {{\n  meta_schedule {{\n    meta_for (int i = 0; i < N; i++)\n      meta_for (int v = {lo}; v < {hi}; v++)\n        meta_for (int u = 0; u < B; u++)\n          a[i][v] = 1.0f;\n  }}\n}}\n");
    for (lo, hi) in [("$i / B", "N"), ("0", "$i * i % B"), ("0", "$min(i, B)")] {
        refused(&nest(lo, hi), "the bounds of grid loop `v` use `i`, the counter of an enclosing grid `meta_for`");
    }
    for (lo, hi, bounds, guard) in [("i", "N", ("0", "N"), "v >= i"), ("0", "i + 1", ("0", "N"), "v < i + 1"), ("i - 2", "i + 3", ("-2", "N - 1 + 3"), "v >= i - 2 && v < i + 3")] {
        let f = check_source("tri.mf", &nest(lo, hi).replace("a[i][v] = 1.0f;", "if (v >= 0 && v < N) a[i][v] = 1.0f;")).unwrap_or_else(|d| panic!("{}", d.render(false))).kernels.remove(0);
        let v = &f.schedules[0].grid[1];
        assert_eq!((v.lo.to_string().as_str(), v.hi.to_string().as_str()), bounds, "{lo} <= v < {hi}");
        let metafork::frontend::ast::StmtKind::If { cond, .. } = &f.schedules[0].body[0].kind else { panic!("no guard: {:?}", f.schedules[0].body) };
        assert_eq!(cond.to_string(), guard);
    }
}

#[test]
fn grid_bound_read_from_an_array() {
    refused(
        "void f(int N, int B, const int len[N], float y[N][N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N; i++)\n      meta_for (int j = 0; j < $len[0]; j++)\n        meta_for (int u = 0; u < B; u++)\n          y[i][j] = 1.0f;\n  }\n}\n",
        "the bounds of grid loop `j` read the array `len`",
    );
}

/// A block group after a serial loop whose extent depends on the grid counter: refused where
/// the bound is written (it was refused later, with no location).
#[test]
fn block_extent_that_depends_on_the_grid_counter() {
    refused(
        "void f(int N, int B, const float x[N], float y[N]) {\n  meta_schedule {\n    meta_for (int v = 0; v < N / B; v++)\n      for (int once = 0; once < 1; once++)\n        meta_for (int u = 0; u < $min(B, N - v * B); u++)\n          y[v * B + u] = 2.0f * x[v * B + u];\n  }\n}\n",
        "the extent of block loop `u` is not a polynomial in the program parameters",
    );
}

/// The host evaluates facts, scalar definitions and host loop bounds in `long long` (the
/// dispatch code with overflow checks, the launch code as C): arithmetic that overflows there
/// made every run fail the fact (or wrap), while the tree, exact, admitted every point.
#[test]
fn host_arithmetic_that_overflows_64_bits() {
    refused("void f(int N) {\n  assume(N <= $9223372036854775807 + 1);\n}\n", "this constant arithmetic overflows 64 bits: a fact");
    refused("void f(int N) {\n  assert(N >= 1 && N < $-(-9223372036854775807 - 1));\n}\n", "this constant arithmetic overflows 64 bits");
    refused("void f(int N) {\n  int big = N + $3037000500 * 3037000500;\n}\n", "this constant arithmetic overflows 64 bits");
    refused("void f(int N) {\n  assume(N < (N > 1 ? $9223372036854775807 * 2 : 1));\n}\n", "this constant arithmetic overflows 64 bits");
    refused("void f(int N) {\n  assume(N >= 1 && $N * 3037000500 * 3037000500 >= 0);\n}\n", "a fact has the coefficient 9223372037000250000, which does not fit in 64 bits");
}

/// What fits in 64 bits stays accepted, however large.
#[test]
fn host_arithmetic_up_to_64_bits_is_accepted() {
    for host in ["assume(N <= 9223372036854775806 + 1);", "assume(N >= -9223372036854775807 - 1);", "long big = N * 3037000499 * 3037000499;", "assume(N <= 1099511627776 * 8388607);"] {
        let src = format!("void f(int N, int B, float c[N]) {{\n  {host}\n  meta_schedule {{\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++)\n        c[i] = 0;\n  }}\n}}\n");
        if let Err(e) = check_source("case.mf", &src) {
            panic!("refused:\n{src}\n{}", e.render(false));
        }
    }
}

/// An integer division by the literal 0 is named as such (it was "the facts contradict each
/// other", from the fact `0 != 0` a divisor becomes), in the host part and in a kernel.
#[test]
fn integer_division_by_zero() {
    refused("void f(int N, int B, float a[N]) {\n  int d = N / $0;\n  meta_schedule {\n    meta_for (int i = 0; i < N; i++)\n      meta_for (int j = 0; j < B; j++) a[i] = 0.0f;\n  }\n}\n", "integer division by zero");
    refused(&kernel("        c[k % $0] = a[k];"), "integer division by zero");
    refused("void f(int N, int B, int s, float a[N]) {\n  int z = B * s;\n  int d = N / $(z - s * B);\n  meta_schedule {\n    meta_for (int i = 0; i < N; i++)\n      meta_for (int j = 0; j < B; j++) a[i] = 0.0f;\n  }\n}\n", "the divisor `z - s * B` is 0 whatever the parameters");
}

/// A reduction into an integer element of a floating term: C truncates each partial sum, so
/// no order of atomic adds of truncated terms computes it (`gen` wrote `atomicAdd(&cnt[0],
/// (int)(w * 3.7f))` and its own `verify` found the mismatch). Refused at the term; a term
/// converted to the element's type, or a floating array, is a reduction.
#[test]
fn a_floating_term_reduced_into_an_integer_element() {
    let src = "void f(int N, int B, const float w[N], int cnt[1], float tot[1]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++) {\n        int k = i * B + j;\n        cnt[0] += $w[k] * 3.7f;\n      }\n  }\n}\n";
    refused(src, "is a reduction across threads into `int` elements, but the value added is `float`");
    refused(&src.replace("+= $w[k]", "-= $w[k]"), "is a reduction across threads into `int` elements");
    check_source("ok.mf", &src.replace("cnt[0] += $w[k] * 3.7f;", "cnt[0] += (int)(w[k] * 3.7f);")).unwrap();
    check_source("ok.mf", &src.replace("cnt[0] += $w[k] * 3.7f;", "tot[0] += w[k] * 3.7f;")).unwrap();
    // Not a reduction (each thread its own element): C's `+=` with truncation, accepted.
    check_source("ok.mf", &src.replace("int cnt[1]", "int cnt[N]").replace("cnt[0] += $w[k] * 3.7f;", "cnt[k] += w[k] * 3.7f;")).unwrap();
}

/// Constant extents whose bytes no 64-bit address reaches: a located error (it was an
/// unlocated "coefficient too large" from the emitter).
#[test]
fn an_array_larger_than_the_address_space() {
    refused("void f(int N, $const float x[9223372036854775807], float y[N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N; i++)\n      meta_for (int j = 0; j < 1; j++)\n        y[i] = x[i];\n  }\n}\n", "array `x` would hold more bytes than a 64-bit address space addresses");
    refused("void f(int N, $float x[4294967296][4294967296], float y[N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N; i++)\n      meta_for (int j = 0; j < 1; j++)\n        y[i] = x[0][i];\n  }\n}\n", "more bytes than a 64-bit address space");
    check_source("ok.mf", "void f(int N, const float x[2147483647], float y[N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N; i++)\n      meta_for (int j = 0; j < 1; j++)\n        y[i] = x[i];\n  }\n}\n").unwrap();
}

/// A chain of host scalars each reading the last twice doubles at each step once expanded,
/// as the run-time checks expand it (18 steps made a 192 MB dispatch header, 39 filled the
/// memory): refused where it passes 10,000 operations. The same chain of kernel locals is
/// accepted at once (its range facts are not written past their size) and ranged no further.
#[test]
fn a_chain_of_definitions_that_doubles_is_refused_where_it_grows_too_large() {
    let mut src = String::from("void chain(long n, int B, const float x[n], float y[n]) {\n  assume(n >= 1 && B >= 1);\n  long d0 = n;\n");
    for k in 1..=39 {
        if k == 11 {
            src.push_str(&format!("  long d{k} = $d{} * 2 + d{} / B;\n", k - 1, k - 1));
        } else {
            src.push_str(&format!("  long d{k} = d{} * 2 + d{} / B;\n", k - 1, k - 1));
        }
    }
    src.push_str("  meta_schedule {\n    meta_for (int v = 0; v < (d39 + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        long i = (long)v * B + u;\n        if (i < n) y[i] = x[i];\n      }\n  }\n}\n");
    refused(&src, "`d11` stands for more than 10000 operations once the scalars it reads are replaced by their definitions");
    let mut locals = String::from("void k(int n, int B, const float x[n], float y[n]) {\n  assume(n >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int v = 0; v < (n + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        long a0 = i;\n");
    for k in 1..=40 {
        locals.push_str(&format!("        long a{k} = a{} / 2 + a{} / 3;\n", k - 1, k - 1));
    }
    locals.push_str("        if (i < n) y[i] = x[i] + (float)a40;\n      }\n  }\n}\n");
    // Before, this ran out of memory (2^40 nodes).
    let program = check_source("locals.mf", &locals).unwrap_or_else(|e| panic!("{}", e.render(false)));
    assert!(program.kernels[0].facts.iter().all(|f| f.condition.to_string().len() < 10_000));
}

/// A type outside the subset is refused where it is written, with the types there are;
/// `long long` and `long int` are `long` (64 bits, as on every CUDA platform), so the message
/// names them too (a helper found `long long` accepted while the message listed only `long`).
#[test]
fn an_unsupported_type_names_the_supported_ones_and_long_long_is_long() {
    for word in ["unsigned", "short", "signed", "bool"] {
        refused(
            &format!("void f(int N, ${word} a[N]) {{ meta_schedule {{ meta_for (int i = 0; i < N; i++) a[i] = 0; }} }}"),
            "only `char`, `int`, `long` (also written `long int` or `long long`), `float` and `double` are supported",
        );
    }
    for spelled in ["long long", "long int", "long"] {
        let program = check_source("ll.mf", &format!("void f(int N, int B, {spelled} a[N]) {{ assume(N >= 1 && B >= 1); meta_schedule {{ meta_for (int i = 0; i < N / B; i++) meta_for (int j = 0; j < B; j++) a[i * B + j] = 0; }} }}")).unwrap();
        let a = program.kernels[0].params.iter().find(|p| p.name == "a").unwrap();
        assert_eq!(a.ty, metafork::frontend::ast::ScalarType::Long, "{spelled}");
    }
}

/// A block loop whose bound reads the grid counter (`t < min(B, N - b*B)`) has no size before
/// the launch: the diagnostic names that counter at the bound, where it said only that no loop
/// had a program-parameter extent (a helper could not tell why). A block loop with a
/// parameter extent is still accepted.
#[test]
fn a_block_bound_reading_the_grid_counter_is_named() {
    refused(
        "void f(int N, int B, const float a[N], float c[N]) {\n  assume(N >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int b = 0; b < (N + B - 1) / B; b++)\n      meta_for (int t = 0; t < $min(B, N - b * B); t++)\n        c[b * B + t] = a[b * B + t];\n  }\n}\n",
        "the bounds of `meta_for` loop `t` use `b`, the counter of an enclosing `meta_for`",
    );
    check_source("ok.mf", "void f(int N, int B, const float a[N], float c[N]) {\n  assume(N >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int b = 0; b < (N + B - 1) / B; b++)\n      meta_for (int t = 0; t < B; t++)\n        if (b * B + t < N) c[b * B + t] = a[b * B + t];\n  }\n}\n").unwrap();
    // The note's guard is the loop's own bound (`j < i / 2`, not a generic `i < N`).
    let e = check_source("tri.mf", "void f(int N, float a[N][N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N; i++)\n      meta_for (int j = 0; j < i / 2; j++)\n        a[i][j] = 0.0f;\n  }\n}\n").unwrap_err().render(false);
    assert!(e.contains("the bounds of `meta_for` loop `j` use `i`") && e.contains("guard the body with the bound instead (`if (j < i / 2)`)"), "{e}");
    // A triangle metafork bounds itself (`j < i`, over `N - 1` threads) still has no extent in
    // the program parameters: that is what is said, not that the bound reads `i`.
    let e = check_source("tri.mf", "void f(int N, float a[N][N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N; i++)\n      meta_for (int j = 0; j < i; j++)\n        a[i][j] = 0.0f;\n  }\n}\n").unwrap_err().render(false);
    assert!(e.contains("tri.mf:4:21") && e.contains("cannot tell which `meta_for` loops form the thread block") && e.contains("the bounds of `j` read `i`") && e.contains("`if (j < i)`"), "{e}");
    // Its start reading the counter: the guard is the start's.
    let e = check_source("tri.mf", "void f(int N, float a[N][N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N; i++)\n      meta_for (int j = i; j < N; j++)\n        a[i][j] = 0.0f;\n  }\n}\n").unwrap_err().render(false);
    assert!(e.contains("the bounds of `j` read `i`") && e.contains("`if (j >= i)`"), "{e}");
}

/// A statement between a grid loop and a block loop: the nest is not perfect, said at the
/// statement (it was "no loop of this group has a program-parameter extent", though `u < B`
/// has one).
#[test]
fn a_statement_between_meta_for_loops_is_named_as_such() {
    refused(
        "void f(int N, int B, float a[N]) {\n  assume(N >= 1 && B >= 1);\n  int nb = (N + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < nb; v++) {\n      $float z = 2.0f;\n      meta_for (int u = 0; u < B; u++) { int i = v * B + u; if (i < N) a[i] = z; }\n    }\n  }\n}\n",
        "`meta_for` loop `u` is not perfectly nested in `v`: a statement stands between them",
    );
}

/// Two bounds joined by `&&`, one reading an enclosing `meta_for` counter: the message's `min`
/// form would be refused in turn (`min` is not affine), so a note gives the form that works.
/// A block loop bounded by the host loop's counter: the note names that counter as such.
#[test]
fn two_bounds_and_a_host_counter_in_a_block_bound_get_notes_that_work() {
    let src = "void d(int N, int B, float c[N][N]) {
  assume(N >= 1 && B >= 1 && N % B == 0);
  int nt = N / B;
  meta_schedule {
    meta_for (int v = 0; v < nt; v++)
      meta_for (int w = 0; w < $nt && w <= v; w++)
        meta_for (int u = 0; u < B; u++)
          c[v * B + u][w] = 1.0f;
  }
}
";
    refused(src, "the loop's bound cannot use its own counter `w`");
    let e = check_source("d.mf", &src.replace('$', "")).unwrap_err().render(false);
    assert!(e.contains("or test one of them in an `if` around the body") && e.contains("keep that one in the loop's condition and test the other in the `if`"), "{e}");
    let fixed = src.replace("w < $nt && w <= v", "w <= v");
    check_source("d.mf", &fixed).unwrap_or_else(|d| panic!("{}", d.render(false)));

    let host = "void h(int N, int T, float c[T][N]) {
  assume(N >= 1 && T >= 1 && T <= 64);
  for (int t = 0; t < T; t++) {
    meta_schedule {
      meta_for (int v = 0; v < N; v++)
        meta_for (int $u = 0; u < t; u++)
          c[u][v] = 1.0f;
    }
  }
}
";
    refused(host, "cannot tell which `meta_for` loops form the thread block");
    let e = check_source("h.mf", &host.replace('$', "")).unwrap_err().render(false);
    assert!(e.contains("the bounds of `u` read `t`, the counter of the host loop around the schedule") && e.contains("`if (u < t)`"), "{e}");
}

/// A block loop bounded by a parameter that also sizes an array (`a[N][B][M]`, `k < M`; a
/// helper's sweep): `M` is a data parameter, so no loop of the group has a program-parameter
/// extent. The note said only to give the loops such extents; it now says that `M` sizes an
/// array, and what to write instead, which is then accepted.
#[test]
fn a_block_bounded_by_an_array_size_says_why_it_is_no_block_size() {
    let src = "void split3(int N, int M, int B, const float a[N][B][M], float c[N][B][M]) {
  assume(N >= 1 && M >= 1 && B >= 1);
  meta_schedule {
    meta_for (int i = 0; i < N; i++)
      meta_for (int j = 0; j < B; j++)
        meta_for (int $k = 0; k < M; k++)
          c[i][j][k] = a[i][j][k] * 2.0f;
  }
}
";
    refused(src, "cannot tell which `meta_for` loops form the thread block");
    let e = check_source("s.mf", &src.replace('$', "")).unwrap_err().render(false);
    assert!(e.contains("`M` sizes an array, so it is a data parameter") && e.contains("`if (k < M)`"), "{e}");
    let fixed = src.replace("$", "").replace("int M, int B,", "int M, int B, int BM,").replace("meta_for (int k = 0; k < M; k++)\n          c[i][j][k]", "meta_for (int k = 0; k < BM; k++)\n          if (k < M) c[i][j][k]");
    assert_ne!(fixed, src.replace('$', ""));
    check_source("s.mf", &fixed).unwrap_or_else(|d| panic!("{}", d.render(false)));
}

/// Dividing by a parameter its facts allow to be 0 (`assume(G >= 0)`, a helper's "wrong
/// program" that every tool stage accepted silently): `G != 0` joins the tree's root, so the
/// dispatcher refuses `G == 0`; `gen` now says so where the division is, once, and says
/// nothing where the facts imply it.
#[test]
fn a_divisor_the_facts_allow_to_be_zero_is_warned_about() {
    let dir = crate::common::scratch("diagnostics-implied-divisor");
    let src = "void group_index(int N, int G, int B, const float x[N], float y[N]) {
  assume(N >= 1 && B >= 1 && G >= 0);
  meta_schedule {
    meta_for (int g = 0; g < (N + B - 1) / B; g++)
      meta_for (int l = 0; l < B; l++) {
        int i = g * B + l;
        if (i < N)
          y[i] = x[(i / G) * G] + x[i % G];
      }
  }
}
";
    let run = |text: &str| {
        std::fs::write(dir.join("g.mf"), text).unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).current_dir(&dir).args(["gen", "--emit-cuda", "g.mf", "-o", "out"]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = run(src);
    assert!(err.contains("g.mf:8:25: warning: `G != 0` is taken as a fact (the program divides by it)") && err.contains("METAFORK_OUTSIDE_ASSUMPTIONS") && err.contains("assume(G != 0)"), "{err}");
    assert_eq!(err.matches("warning").count(), 1, "one warning for one fact: {err}");
    let dispatch = std::fs::read_to_string(dir.join("out/group_index_dispatch.h")).unwrap();
    assert!(dispatch.contains("G != 0"), "the dispatcher checks the fact");
    let err = run(&src.replace("G >= 0", "G >= 1"));
    assert!(!err.contains("warning"), "{err}");
}
