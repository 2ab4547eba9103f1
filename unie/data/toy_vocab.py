"""The toy world's words (:mod:`unie.data.toy_world`): its scenes, each scene's words and the shared ones by
grammatical role, and the vocabulary in id order.  Apart from the HMM so that what only needs the words (the toy
tasks' generators, :mod:`unie.data.tasks`, which the workflow's rule files import) imports no torch."""

from __future__ import annotations

SCENES = ("cat", "dog", "car", "cook", "bird", "ship", "farm", "school")

SCENE_WORDS = {
    "cat": dict(
        adj=("fluffy", "sleepy", "striped"),
        subj=("cat", "kitten", "tabby", "tomcat", "puss"),
        verb=("chases", "scratches", "licks"),
        obj=("mouse", "yarn", "milk", "mat", "catnip"),
        place=("sofa", "basket", "windowsill"),
    ),
    "dog": dict(
        adj=("loyal", "muddy", "barking"),
        subj=("dog", "puppy", "hound", "terrier", "mutt"),
        verb=("chews", "fetches", "buries"),
        obj=("bone", "ball", "stick", "leash", "slipper"),
        place=("kennel", "yard", "park"),
    ),
    "car": dict(
        adj=("fast", "shiny", "rusty"),
        subj=("car", "truck", "van", "taxi", "jeep"),
        verb=("drives", "parks", "honks"),
        obj=("road", "fuel", "tire", "engine", "wheel"),
        place=("garage", "highway", "street"),
    ),
    "cook": dict(
        adj=("hungry", "busy", "tired"),
        subj=("cook", "chef", "baker", "waiter", "butcher"),
        verb=("bakes", "fries", "stirs"),
        obj=("soup", "bread", "pie", "onion", "pan"),
        place=("kitchen", "oven", "restaurant"),
    ),
    "bird": dict(
        adj=("tiny", "singing", "feathered"),
        subj=("bird", "sparrow", "crow", "robin", "parrot"),
        verb=("pecks", "flies", "nests"),
        obj=("worm", "seed", "twig", "feather", "nest"),
        place=("tree", "sky", "branch"),
    ),
    "ship": dict(
        adj=("wooden", "sinking", "giant"),
        subj=("ship", "sailor", "captain", "boat", "pirate"),
        verb=("sails", "anchors", "steers"),
        obj=("wave", "sail", "anchor", "rope", "mast"),
        place=("harbor", "sea", "dock"),
    ),
    "farm": dict(
        adj=("muddy", "green", "sunny"),
        subj=("farmer", "cow", "horse", "pig", "goat"),
        verb=("plows", "milks", "harvests"),
        obj=("hay", "corn", "fence", "barn", "tractor"),
        place=("field", "meadow", "stable"),
    ),
    "school": dict(
        adj=("clever", "young", "strict"),
        subj=("teacher", "student", "pupil", "tutor", "class"),
        verb=("reads", "writes", "teaches"),
        obj=("book", "lesson", "pencil", "exam", "map"),
        place=("classroom", "library", "hall"),
    ),
}

SHARED_WORDS = dict(
    det=("the", "a", "this", "that", "every", "my", "your", "his", "her", "our"),
    adj=("big", "small", "old", "new", "good", "bad", "little", "happy", "quiet", "strange"),
    subj=("friend", "animal", "thing", "one"),
    verb=("sees", "likes", "finds", "wants", "has", "takes"),
    obj=("food", "toy", "something", "gift"),
    prep=("on", "in", "near", "under", "by", "with", "behind"),
    place=("home", "town", "garden"),
    punct=(".", "!", "?"),
)

ROLES = ("s_det", "s_adj", "subj", "verb", "o_det", "o_adj", "obj", "prep", "p_det", "place", "punct", "eos")
ROLE_CATEGORY = dict(
    s_det="det",
    s_adj="adj",
    subj="subj",
    verb="verb",
    o_det="det",
    o_adj="adj",
    obj="obj",
    prep="prep",
    p_det="det",
    place="place",
    punct="punct",
    eos="eos",
)
EOS_WORD = "<eos>"


def word_list() -> list[str]:
    """The vocabulary in id order (without specials): shared words, then each scene's words."""
    words: list[str] = []
    for cat in ("det", "adj", "subj", "verb", "obj", "prep", "place", "punct"):
        words += [w for w in SHARED_WORDS[cat] if w not in words]
    for scene in SCENES:
        for cat in ("adj", "subj", "verb", "obj", "place"):
            words += [w for w in SCENE_WORDS[scene][cat] if w not in words]
    return words
