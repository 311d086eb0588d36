// A training option that is missing, out of range or disagrees with a checkpoint. The message names the
// fields of train_options (train/trainer.hpp) that are at fault, the model's as "model.layers", so each
// front end can name them its own way: xgrad-train says "--layers" (tools/train_args.cpp), Python says
// the keyword.
//
//   throw option_error("{} must be at least 1, got 0", {"steps"});
//   e.what()                 -> "steps must be at least 1, got 0"
//   e.message(flag_of_field) -> "--steps must be at least 1, got 0"
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace xgrad::train
{
// What is wrong: the value itself (a step count of 0, two options that contradict each other), or a value
// that is fine but disagrees with the files it names (a checkpoint trained on another vocabulary).
enum class option_problem
{
    bad_value,
    disagrees_with_files,
};

struct option_error : std::invalid_argument
{
    // `format` holds one "{}" per entry of `fields`, in order; "{{" stands for "{" (see literal).
    option_error(std::string format, std::vector<std::string> fields,
                 option_problem problem = option_problem::bad_value);

    // Text to put into a format as it is (a path, a value someone typed): its "{" doubled.
    static std::string literal(const std::string& text);

    // The message with the i-th "{}" replaced by name(fields[i]).
    std::string message(const std::function<std::string(const std::string&)>& name) const;

    std::string format;
    std::vector<std::string> fields;
    option_problem problem;
};
}  // namespace xgrad::train
