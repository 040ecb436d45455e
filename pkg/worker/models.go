package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/cloudwego/eino-ext/components/model/openai"
	"github.com/cloudwego/eino/components/model"

	"github.com/turnpike-dev/turnpike/pkg/echo"
)

// newModel builds the model of Config.Model: the echo model, or an
// OpenAI-compatible one.
func (c Config) newModel() (model.ToolCallingChatModel, error) {
	switch c.Model {
	case providerEcho:
		return echo.New(echo.Config{Delay: c.EchoDelay})
	case providerOpenAI:
		if c.OpenAIModel == "" {
			return nil, errors.New("TURNPIKE_OPENAI_MODEL is required with TURNPIKE_MODEL=openai")
		}
		return newOpenAIModel(c.OpenAIBaseURL, c.OpenAIAPIKey, c.OpenAIModel)
	}
	return nil, fmt.Errorf("TURNPIKE_MODEL %q: want echo or openai", c.Model)
}

// NewModel builds the model of c.Model (the echo model with EchoDelay, or
// the OpenAI-compatible model of the OpenAI settings): the model of the
// agent the worker builds without Go code, and the default compaction
// summarizer. An agent written in Go may run on it; a shadow replay's
// -agent direct streams it.
func (c Config) NewModel() (model.ToolCallingChatModel, error) { return c.newModel() }

// modelLabel labels Config.Model's token usage in metrics: echo, or the
// OpenAI-compatible model's name.
func (c Config) modelLabel() string {
	if c.Model == providerOpenAI {
		return c.OpenAIModel
	}
	return c.Model
}

// newOpenAIModel is eino-ext's OpenAI chat model on an OpenAI-compatible
// API at baseURL (default: OpenAI's), streaming with usage in the last
// chunk. The run's context bounds each call (Config.RunTimeout).
func newOpenAIModel(baseURL, apiKey, name string) (model.ToolCallingChatModel, error) {
	m, err := openai.NewChatModel(context.Background(), &openai.ChatModelConfig{BaseURL: baseURL, APIKey: apiKey, Model: name})
	if err != nil {
		return nil, fmt.Errorf("openai model %s: %w", name, err)
	}
	return m, nil
}

// newAgentModels builds the models the agent configuration names. An
// openai model without a base_url uses Config.OpenAIBaseURL, and reads
// its API key from api_key_env (with getenv), else Config.OpenAIAPIKey.
func (c Config) newAgentModels(spec *agentConfig, getenv func(string) string) (map[string]model.ToolCallingChatModel, error) {
	if spec == nil {
		return nil, nil
	}
	out := make(map[string]model.ToolCallingChatModel, len(spec.Models))
	var errs []error
	for name, ms := range spec.Models {
		var m model.ToolCallingChatModel
		var err error
		switch ms.Provider {
		case providerEcho:
			m, err = echo.New(echo.Config{Delay: c.EchoDelay})
		case providerOpenAI:
			baseURL, key := cmp.Or(ms.BaseURL, c.OpenAIBaseURL), c.OpenAIAPIKey
			if ms.APIKeyEnv != "" {
				if key = getenv(ms.APIKeyEnv); key == "" {
					err = fmt.Errorf("api_key_env %s is not set", ms.APIKeyEnv)
					break
				}
			}
			m, err = newOpenAIModel(baseURL, key, ms.Model)
		default:
			err = fmt.Errorf("provider %q: want echo or openai", ms.Provider)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("agent config: models.%s: %w", name, err))
			continue
		}
		out[name] = m
	}
	return out, errors.Join(errs...)
}
