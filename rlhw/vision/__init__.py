"""Vision for learning: image augmentation, image encoders and the learned success (reward) classifier.

A layer below rlhw.robot and rlhw.rl: the env runs a classifier from here, the agent uses the encoders.
It imports only rlhw.config and rlhw.errors (and torch), never rlhw.robot, rlhw.rl or rlhw.env.

- rlhw.vision.augment: DrQ random shift on uint8 image batches;
- rlhw.vision.encoders: `build_image_encoder` (kinds cnn, resnet10, resnet18), weights from a local file;
- rlhw.vision.labels: frame labels from recorded episodes, split by episode;
- rlhw.vision.classifier: the success classifier, its model file, and the per-step judge the env runs;
- rlhw.vision.train_classifier: training and held-out metrics.
"""
