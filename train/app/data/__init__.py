"""Datasets, batch samplers, host prefetching and two-view augmentations.

- ``digits``: scikit-learn's bundled ``load_digits`` (1,797 8×8 images, 10 classes), offline; a fixed,
  stratified, seeded train/test split.
- ``mnist``, ``fashion_mnist``, ``cifar10``, ``cifar100`` and any ``tfds:NAME`` with ``image`` and ``label``
  features and train/test splits: ``tfds.data_source`` (no TensorFlow needed to read), one element at a
  time; the data must have been prepared in the ``array_record`` format (an error says how otherwise).
- ``npz:PATH``: a local ``.npz`` with ``images`` [N, H, W(, C)] and ``labels`` [N]; split like digits.
- ``idx:DIR``: a folder holding the four IDX files that MNIST, Fashion-MNIST and KMNIST are distributed as
  (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
  ``t10k-labels-idx1-ubyte``; each plain or .gz, not both), with their own train/test split. Every file is
  checked before training starts.

Images are float32 in [0, 1], [N, H, W, C] (:func:`compact` stores 8-bit data as uint8 for the devices).
The sampler is one jnp function of (seed, step) and the label tables: the training step evaluates it on the
devices (data held there), or the host evaluates it on its CPU and gathers the rows in NumPy; both give the
same batches, so a resumed run, or a run on another number of devices or processes, sees the same data.
Augmentations are jnp functions of a key, applied per example with a key folded from the example's global
position in the batch (the same views on 1 or many devices).
"""

from train.app.data._augment import AUGMENTATIONS as AUGMENTATIONS
from train.app.data._augment import Augmentation as Augmentation
from train.app.data._augment import color_jitter as color_jitter
from train.app.data._augment import crop_flip as crop_flip
from train.app.data._augment import crop_jitter_gray as crop_jitter_gray
from train.app.data._augment import identity as identity
from train.app.data._augment import random_resized_crop as random_resized_crop
from train.app.data._augment import shift as shift
from train.app.data._augment import simclr as simclr
from train.app.data._augment import views as views
from train.app.data._dataset import SPLIT_SEED as SPLIT_SEED
from train.app.data._dataset import UNIT as UNIT
from train.app.data._dataset import Dataset as Dataset
from train.app.data._dataset import compact as compact
from train.app.data._dataset import disjoint_classes as disjoint_classes
from train.app.data._dataset import hold_out as hold_out
from train.app.data._dataset import to_unit as to_unit
from train.app.data._feed import T as T
from train.app.data._feed import prefetch as prefetch
from train.app.data._idx import IDX_FILES as IDX_FILES
from train.app.data._idx import idx_to_npz as idx_to_npz
from train.app.data._idx import main as main
from train.app.data._idx import read_idx as read_idx
from train.app.data._loaders import DATA_DIR as DATA_DIR
from train.app.data._loaders import DATASETS as DATASETS
from train.app.data._loaders import TEST_FRACTION as TEST_FRACTION
from train.app.data._loaders import TFDS_NAMES as TFDS_NAMES
from train.app.data._loaders import check_dataset_name as check_dataset_name
from train.app.data._loaders import dataset_source as dataset_source
from train.app.data._loaders import load as load
from train.app.data._loaders import prepare as prepare
from train.app.data._samplers import SAMPLER_STREAM as SAMPLER_STREAM
from train.app.data._samplers import Batches as Batches
from train.app.data._samplers import class_subsampled_rows as class_subsampled_rows
from train.app.data._samplers import label_tables as label_tables
from train.app.data._samplers import m_per_class_rows as m_per_class_rows
from train.app.data._samplers import random_rows as random_rows
from train.app.data._samplers import sample as sample
