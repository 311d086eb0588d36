# examples/gpt_gradcheck as a user runs it, on small models of the variants: a clean run finds no
# divergence; each of the variants' deliberate mistakes (--break) is reported at the gradient it corrupts
# first; a --break the variant does not use, and an unknown variant value, are refused.
if(TARGET gpt_gradcheck)
  set(small --layers 2 --d-model 8 --heads 2 --kv-heads 1)
  set(llama --norm rmsnorm --position rope --mlp swiglu --bias none --untied-head)
  set(gpt2 --bias all --mlp gelu --mlp-hidden 12)
  add_test(NAME gpt_gradcheck_llama COMMAND gpt_gradcheck ${small} ${llama})
  set_tests_properties(gpt_gradcheck_llama PROPERTIES PASS_REGULAR_EXPRESSION "no divergence: all 42 gradients agree")
  add_test(NAME gpt_gradcheck_gpt2 COMMAND gpt_gradcheck ${small} ${gpt2} --untied-head)
  set_tests_properties(gpt_gradcheck_gpt2 PROPERTIES PASS_REGULAR_EXPRESSION "no divergence")
  # The later variants (docs/spec.md, "More architecture variants"), each alone and all together.
  foreach(case "qk_norm|--qk-norm;rms" "relu2|--mlp;relu2" "softcap|--logit-softcap;3"
      "window|--attention-window;2" "speedrun|--qk-norm;rms;--mlp;relu2;--logit-softcap;30;--attention-window;3;--position;rope")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(REMOVE_AT parts 0)
    add_test(NAME gpt_gradcheck_${name} COMMAND gpt_gradcheck ${small} ${parts})
    set_tests_properties(gpt_gradcheck_${name} PROPERTIES
      PASS_REGULAR_EXPRESSION "no divergence: all [0-9]+ gradients agree")
  endforeach()
  foreach(case
      "rms_norm|llama|blocks.1.res_1" "rope|llama|blocks.1.ln_1" "swiglu|llama|blocks.1.mlp_gate"
      "untied_head|llama|lm_head" "gelu_exact|gpt2|blocks.1.mlp_hidden" "attention_bias|gpt2|blocks.1.attn.b_Q")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 rule)
    list(GET parts 1 variant)
    list(GET parts 2 node)
    add_test(NAME gpt_gradcheck_break_${rule} COMMAND gpt_gradcheck ${small} ${${variant}} --untied-head --break ${rule})
    string(REPLACE "." "[.]" node_pattern "${node}")
    set_tests_properties(gpt_gradcheck_break_${rule} PROPERTIES
      PASS_REGULAR_EXPRESSION "first divergence: d ${node_pattern} \\(")
  endforeach()
  # The later variants' mistakes, each on the variant that uses its rule: "rule|first wrong node|flags".
  foreach(case "head_rms|blocks.1.ln_1|--qk-norm;rms" "relu2|blocks.1.mlp_hidden|--mlp;relu2"
      "softcap|lm_head|--logit-softcap;3")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 rule)
    list(GET parts 1 node)
    list(REMOVE_AT parts 0 1)
    add_test(NAME gpt_gradcheck_break_${rule} COMMAND gpt_gradcheck ${small} ${parts} --untied-head --break ${rule})
    string(REPLACE "." "[.]" node_pattern "${node}")
    set_tests_properties(gpt_gradcheck_break_${rule} PROPERTIES
      PASS_REGULAR_EXPRESSION "first divergence: d ${node_pattern} \\(")
  endforeach()
  add_test(NAME gpt_gradcheck_refuses COMMAND gpt_gradcheck --break rope)
  set_tests_properties(gpt_gradcheck_refuses PROPERTIES
    PASS_REGULAR_EXPRESSION "gpt_gradcheck: --break rope: this variant does not use the rule \\(needs --position rope\\)")
  add_test(NAME gpt_gradcheck_bad_value COMMAND gpt_gradcheck --mlp relu)
  set_tests_properties(gpt_gradcheck_bad_value PROPERTIES
    PASS_REGULAR_EXPRESSION "--mlp 'relu' is not one of gelu_tanh, gelu, swiglu, relu2")
  # A pass regex makes ctest ignore the exit status: a sanitizer's report must still fail the test.
  get_property(gradcheck_tests DIRECTORY PROPERTY TESTS)
  list(FILTER gradcheck_tests INCLUDE REGEX "^gpt_gradcheck_")
  set_tests_properties(${gradcheck_tests} PROPERTIES FAIL_REGULAR_EXPRESSION "Sanitizer|runtime error")
  # The gradient tables (central differences of whole models); the refusals stay under the sanitizers.
  list(FILTER gradcheck_tests EXCLUDE REGEX "_(refuses|bad_value)$")
  xgrad_not_under_sanitizers(${gradcheck_tests})
endif()
