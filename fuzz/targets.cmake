# The fuzz targets, one fuzz/<name>.cpp each, and the sources of xgrad each one needs besides io/*.cpp
# and its helpers. Read by fuzz/CMakeLists.txt (the libFuzzer build with clang) and by
# tests/fuzz_replay.cmake (the ctest replay of fuzz/regressions and fuzz/corpus in the normal build, which
# links each such source as the library tools/command_lines.cmake makes of it).
# The targets in XGRAD_FUZZ_WHOLE_LIBRARY reach the model code and are linked with all of the library;
# those in XGRAD_FUZZ_NEEDS_TRAIN reach train/ as well.
set(XGRAD_FUZZ_TARGETS npy safetensors checkpoint mha_npy_args gpt_npy_args train_args gpt2_tokenizer
  experiment_spec sentencepiece_model)
set(XGRAD_FUZZ_WHOLE_LIBRARY checkpoint gpt_npy_args train_args gpt2_tokenizer experiment_spec sentencepiece_model)
# The normal build's replay links xgrad, not only xgrad::core, for these:
set(XGRAD_FUZZ_NEEDS_TRAIN train_args gpt2_tokenizer experiment_spec sentencepiece_model)
set(XGRAD_FUZZ_SOURCES_checkpoint "")
set(XGRAD_FUZZ_SOURCES_npy "")
set(XGRAD_FUZZ_SOURCES_safetensors "")
set(XGRAD_FUZZ_SOURCES_mha_npy_args tools/mha_npy_args.cpp)
set(XGRAD_FUZZ_SOURCES_gpt_npy_args tools/gpt_npy_args.cpp)  # and the whole library: its variant flags too
set(XGRAD_FUZZ_SOURCES_train_args tools/train_args.cpp)  # and the whole library: the variant flags parse into models/
set(XGRAD_FUZZ_SOURCES_gpt2_tokenizer "")
set(XGRAD_FUZZ_SOURCES_experiment_spec "")  # experiment/grid_spec.cpp: in the whole library
set(XGRAD_FUZZ_SOURCES_sentencepiece_model "")  # train/tokenizer.cpp: in the whole library
