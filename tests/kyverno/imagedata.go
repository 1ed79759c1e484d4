package main

import (
	"context"

	"github.com/kyverno/sdk/extensions/cel/utils"
	"github.com/kyverno/sdk/extensions/imagedataloader"
)

// fetchImageData answers what image.GetMetadata answers in Kyverno for each image (its context provider's
// GetImageData: the image data loader's FetchImageData, JSON of its Data()), or the error, by image: the
// reference the differential tests compare vpol's registry reads with. No credentials, as Kyverno without
// --imagePullSecrets; go-containerregistry's own rules say which registries are read over plain HTTP.
func fetchImageData(images []string) (map[string]any, error) {
	fetcher, err := imagedataloader.New(nil, nil, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, image := range images {
		data, err := fetcher.FetchImageData(context.Background(), image, nil, nil)
		if err != nil {
			out[image] = map[string]any{"error": err.Error()}
			continue
		}
		value, err := utils.GetValue(data.Data())
		if err != nil {
			out[image] = map[string]any{"error": err.Error()}
			continue
		}
		out[image] = map[string]any{"data": value}
	}
	return map[string]any{"imageData": out}, nil
}
