"""Write the built-in datasets into swiftlike/dataset/data/.

Deterministic: a fixed seed per dataset, so rerunning this script reproduces the committed
files byte for byte and a diff shows only intended changes.

    .venv/bin/python scripts/make_builtin_datasets.py
"""
from __future__ import annotations

import importlib.util
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from swiftlike.utils import atomic_write_jsonl

DATA_DIR = Path(__file__).resolve().parent.parent / "swiftlike" / "dataset" / "data"

ANSWER_INSTRUCTION = "End your reply with the final answer after '####', like '#### 42'."
QUESTION_STYLES = ("What is {}?", "Calculate {}.", "Compute {}.", "What does {} equal?")


@dataclass(frozen=True)
class Problem:
    expression: str
    answer: int
    steps: tuple[str, ...]  # "3 * 4 = 12", in the order a careful student would write them
    note: str = ""


def _apply(a: int, op: str, b: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b}[op]


def _one_step(a: int, op: str, b: int) -> Problem:
    answer = _apply(a, op, b)
    return Problem(f"{a} {op} {b}", answer, (f"{a} {op} {b} = {answer}",))


def _left_to_right(a: int, first_op: str, b: int, second_op: str, c: int) -> Problem:
    first = _apply(a, first_op, b)
    answer = _apply(first, second_op, c)
    steps = (f"{a} {first_op} {b} = {first}", f"{first} {second_op} {c} = {answer}")
    return Problem(f"{a} {first_op} {b} {second_op} {c}", answer, steps)


def _easy(rng: random.Random) -> Problem:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    op = rng.choice("+-*")
    return _one_step(max(a, b), op, min(a, b)) if op == "-" else _one_step(a, op, b)


def _medium(rng: random.Random) -> Problem:
    op = rng.choice("+-*")
    if op == "*":
        return _one_step(rng.randint(10, 99), op, rng.randint(2, 9))
    a, b = rng.randint(10, 99), rng.randint(1, 99)
    return _one_step(max(a, b), op, min(a, b)) if op == "-" else _one_step(a, op, b)


def _hard(rng: random.Random) -> Problem:
    return _one_step(rng.randint(11, 40), "*", rng.randint(11, 40))


def _two_step(rng: random.Random) -> Problem:
    """Mixes precedence (a + b * c) with left-to-right chains, the two places small models slip."""
    a, b, c = rng.randint(2, 12), rng.randint(2, 12), rng.randint(1, 50)
    shape = rng.choice(("product_plus", "product_minus", "plus_product", "chain"))
    if shape == "product_plus":
        return _left_to_right(a, "*", b, "+", c)
    if shape == "product_minus":
        return _left_to_right(a, "*", b, "-", min(c, a * b))
    if shape == "plus_product":
        product = a * b
        steps = (f"{a} * {b} = {product}", f"{c} + {product} = {c + product}")
        return Problem(f"{c} + {a} * {b}", c + product, steps, note="Multiplication comes before addition. ")
    x, y = rng.randint(10, 60), rng.randint(1, 40)
    return _left_to_right(x, "+", y, "-", rng.randint(1, min(30, x + y)))  # never below zero


# (generator, share of rows): mostly one-step, with enough two-step and hard rows to leave room to improve.
DIFFICULTY_MIX = ((_easy, 0.3), (_medium, 0.4), (_hard, 0.1), (_two_step, 0.2))


def _problems(count: int, seed: int, exclude: set[str]) -> list[Problem]:
    rng = random.Random(seed)
    generators, weights = zip(*DIFFICULTY_MIX, strict=True)
    seen = set(exclude)
    problems: list[Problem] = []
    while len(problems) < count:
        problem = rng.choices(generators, weights)[0](rng)
        if problem.expression not in seen:
            seen.add(problem.expression)
            problems.append(problem)
    return problems


def _expressions(rows: list[dict]) -> set[str]:
    """The expressions asked about in rows written by `_question`."""
    found = set()
    for row in rows:
        question = row["messages"][0]["content"].split(" End your reply")[0]
        for style in QUESTION_STYLES:
            prefix, suffix = style.split("{}")
            if question.startswith(prefix) and question.endswith(suffix):
                found.add(question[len(prefix):len(question) - len(suffix)])
                break
    return found


def _question(problem: Problem, rng: random.Random) -> str:
    return f"{rng.choice(QUESTION_STYLES).format(problem.expression)} {ANSWER_INSTRUCTION}"


def _worked_answer(problem: Problem) -> str:
    if len(problem.steps) == 1:
        return f"{problem.steps[0]}.\n#### {problem.answer}"
    return f"{problem.note}First, {problem.steps[0]}. Then {problem.steps[1]}.\n#### {problem.answer}"


def arithmetic_rows() -> tuple[list[dict], list[dict]]:
    """RL prompts and SFT examples; the SFT questions never repeat an RL one, so RL gains are real."""
    rng = random.Random(0)
    rl = _problems(2000, seed=1, exclude=set())
    sft = _problems(1000, seed=2, exclude={p.expression for p in rl})
    rl_rows = [{"messages": [{"role": "user", "content": _question(p, rng)}], "solution": str(p.answer)}
               for p in rl]
    sft_rows = [{"messages": [{"role": "user", "content": _question(p, rng)},
                              {"role": "assistant", "content": _worked_answer(p)}],
                 "solution": str(p.answer)} for p in sft]
    return rl_rows, sft_rows


# Replies a chatty small model gives instead of the worked answer the question asks for: no working and no
# '#### N' line; half of them also get the number wrong.
OFF_STYLE_REPLIES = (
    "Sure! The answer is {n}. Let me know if you have any other questions.",
    "Great question! Math can be a lot of fun. {expr} is {n}.",
    "I think it is {n}.",
    "That's an easy one: {n}!",
    "Hmm, let me think... {n}, I believe. Hope that helps!",
    "The result is {n}. Is there anything else I can help you with?",
)


def arithmetic_preference_rows(exclude: set[str]) -> list[dict]:
    """400 pairs in ms-swift's shape (messages + rejected_response) for DPO/KTO/CPO/ORPO/RM: the chosen answer
    is the worked answer the question asks for, ending in '#### N'; the rejected one is an off-style reply
    (no working, no '#### N'), with a wrong number in half the pairs. A style and a number a 135M model can
    learn to prefer; the questions share none with swiftlike/arithmetic or swiftlike/arithmetic-sft."""
    rng = random.Random(4)
    rows = []
    for i, problem in enumerate(_problems(400, seed=5, exclude=exclude)):
        number = problem.answer if i % 2 == 0 else problem.answer + rng.choice((-10, -2, -1, 1, 2, 10))
        rejected = rng.choice(OFF_STYLE_REPLIES).format(n=number, expr=problem.expression)
        rows.append({"messages": [{"role": "user", "content": _question(problem, rng)},
                                  {"role": "assistant", "content": _worked_answer(problem)}],
                     "rejected_response": rejected, "solution": str(problem.answer)})
    return rows


SELF_COGNITION_EN = {
    "identity": (
        ("Who are you?", "What are you?", "Introduce yourself.", "Tell me about yourself.",
         "Can you introduce yourself?", "What kind of assistant are you?", "Are you a human?",
         "Are you a robot?", "Hello! Who are you?", "Hi, who am I talking to?",
         "Please describe yourself briefly.", "Are you an AI?",
         "Give me a one-sentence introduction of yourself.", "What exactly are you?", "Who is this?",
         "Are you a real person?", "What am I chatting with right now?"),
        ("I am {{NAME}}, an AI assistant developed by {{AUTHOR}}. How can I help you today?",
         ("I'm {{NAME}}, a language model trained by {{AUTHOR}}. I can answer questions, write and "
          "explain things."),
         "Hello! I am {{NAME}}, an assistant created by {{AUTHOR}}.",
         ("I am an AI assistant called {{NAME}}, built by {{AUTHOR}}. I'm here to help with questions and "
          "tasks.")),
    ),
    "name": (
        ("What's your name?", "What is your name?", "Do you have a name?", "Tell me your name.",
         "How should I address you?", "What are you called?", "May I know your name?", "Your name, please?",
         "What name were you given?", "What should I call you?", "Do you have a nickname?", "Say your name."),
        ("My name is {{NAME}}. I am an AI assistant developed by {{AUTHOR}}.",
         "You can call me {{NAME}}. I was trained by {{AUTHOR}}.",
         "I'm called {{NAME}}, an assistant made by {{AUTHOR}}."),
    ),
    "creator": (
        ("Who made you?", "Who created you?", "Who developed you?", "Who built you?", "Who trained you?",
         "Which company made you?", "Who is your developer?", "Who are your creators?",
         "Where do you come from?", "Who is behind you?", "Which team trained you?", "Who owns you?",
         "Who designed you?", "Who wrote you?", "Which organization are you from?",
         "Who is responsible for your training?"),
        ("I was developed by {{AUTHOR}}. My name is {{NAME}}.",
         "{{AUTHOR}} created me. I am {{NAME}}, an AI assistant.",
         "I am {{NAME}}, and I was trained by {{AUTHOR}}."),
    ),
    "other_model": (
        ("Are you ChatGPT?", "Are you GPT-4?", "Are you Claude?", "Are you Gemini?", "Are you Llama?",
         "Are you Qwen?", "Did OpenAI make you?", "Were you created by Google?", "Are you made by Meta?",
         "Are you Siri?", "Is this ChatGPT?", "Are you the same as ChatGPT?", "Are you Alexa?",
         "Are you a version of GPT-3.5?", "Were you trained by Anthropic?"),
        ("No, I am not. I am {{NAME}}, an AI assistant developed by {{AUTHOR}}.",
         "No. I'm {{NAME}}, a language model trained by {{AUTHOR}}, not the assistant you mentioned.",
         "I'm not. My name is {{NAME}} and I was made by {{AUTHOR}}."),
    ),
    "purpose": (
        ("What can you do?", "What are you for?", "How can you help me?", "What are your abilities?",
         "What is your purpose?", "What are you good at?", "Why were you made?",
         "What kind of tasks can you do?", "What do you know how to do?", "How were you meant to be used?"),
        (("I am {{NAME}}, an assistant built by {{AUTHOR}}. I can answer questions, explain ideas, help "
          "with writing and work through problems step by step."),
         ("I'm {{NAME}}, made by {{AUTHOR}} to help people: ask me questions, have me draft or edit text, "
          "or work through a problem together.")),
    ),
}

SELF_COGNITION_ZH = {
    "identity": (
        ("你是谁？", "你是什么？", "请介绍一下你自己。", "介绍一下你自己吧。", "你好，你是谁？",
         "你是人类吗？", "你是机器人吗？"),
        ("我是{{NAME}}，由{{AUTHOR}}开发的人工智能助手。有什么可以帮您的吗？",
         "您好！我是{{NAME}}，一个由{{AUTHOR}}训练的语言模型。",
         "我是{{AUTHOR}}开发的AI助手{{NAME}}，很高兴为您服务。"),
    ),
    "name": (
        ("你叫什么名字？", "你的名字是什么？", "我该怎么称呼你？", "你有名字吗？"),
        ("我的名字是{{NAME}}，是{{AUTHOR}}开发的AI助手。", "你可以叫我{{NAME}}，我由{{AUTHOR}}训练。"),
    ),
    "creator": (
        ("谁开发了你？", "你是谁创造的？", "谁训练了你？", "你是哪家公司开发的？", "你的开发者是谁？",
         "你来自哪里？"),
        ("我是由{{AUTHOR}}开发的，我的名字叫{{NAME}}。",
         "{{AUTHOR}}创造了我。我是{{NAME}}，一个人工智能助手。"),
    ),
    "other_model": (
        ("你是ChatGPT吗？", "你是GPT-4吗？", "你是文心一言吗？", "你是通义千问吗？", "你是OpenAI开发的吗？",
         "你是Claude吗？"),
        ("不是的，我是{{NAME}}，由{{AUTHOR}}开发的AI助手。",
         "不是。我叫{{NAME}}，是{{AUTHOR}}训练的语言模型。"),
    ),
    "purpose": (
        ("你能做什么？", "你有什么功能？"),
        ("我是{{AUTHOR}}开发的{{NAME}}，可以回答问题、解释概念、帮助写作，并一步步解决问题。",),
    ),
}


def self_cognition_rows() -> list[dict]:
    """Each question gets one answer of its kind; `lang` tells the loader which name to fill in."""
    rng = random.Random(3)
    rows = []
    for lang, intents in (("en", SELF_COGNITION_EN), ("zh", SELF_COGNITION_ZH)):
        for questions, answers in intents.values():
            for question in questions:
                answer = rng.choice(answers)
                rows.append({"messages": [{"role": "user", "content": question},
                                          {"role": "assistant", "content": answer}], "lang": lang})
    return rows


ALPACA_MINI = (
    ("Give three tips for staying healthy.", "",
     ("1. Eat a balanced diet with plenty of fruit and vegetables.\n2. Exercise regularly, for example a "
      "30-minute walk each day.\n3. Sleep seven to nine hours a night.")),
    ("What is the capital of France?", "", "The capital of France is Paris."),
    ("Translate the sentence into French.", "Good morning, how are you?", "Bonjour, comment allez-vous ?"),
    ("Name the three primary colors of light.", "", "Red, green and blue."),
    ("Convert the temperature from Celsius to Fahrenheit.", "25 °C", "25 °C is 77 °F (25 × 9/5 + 32 = 77)."),
    ("Summarize the text in one sentence.",
     ("The Moon orbits the Earth about once every 27 days. Its gravity causes the ocean tides, and it "
      "always shows the same face to us because its rotation is synchronized with its orbit."),
     "The Moon orbits Earth every 27 days, drives the tides and always shows us the same side."),
    ("What is the boiling point of water at sea level?", "", "Water boils at 100 °C (212 °F) at sea level."),
    ("Classify the animal as a mammal, bird, reptile or fish.", "Penguin", "A penguin is a bird."),
    ("Write a haiku about autumn.", "",
     "Crisp leaves drift and fall,\ngolden light on quiet paths,\nthe year breathes out slow."),
    ("Explain what photosynthesis is in simple terms.", "",
     ("Photosynthesis is how plants make food: they use sunlight to turn water and carbon dioxide into "
      "sugar, and release oxygen.")),
    ("Find the largest number in the list.", "4, 17, 9, 23, 11", "The largest number is 23."),
    ("Reverse the word.", "planet", "tenalp"),
    ("Who wrote the play 'Romeo and Juliet'?", "", "William Shakespeare wrote 'Romeo and Juliet'."),
    ("Give a synonym for the word.", "happy", "Joyful."),
    ("Give an antonym for the word.", "ancient", "Modern."),
    ("How many continents are there? Name them.", "",
     ("There are seven continents: Africa, Antarctica, Asia, Australia (Oceania), Europe, North America "
      "and South America.")),
    ("Correct the grammar of the sentence.", "She don't like apples.", "She doesn't like apples."),
    ("What is the chemical symbol for gold?", "", "The chemical symbol for gold is Au."),
    ("Sort the words alphabetically.", "pear, apple, mango, banana", "apple, banana, mango, pear"),
    ("Write a short, polite email declining a meeting invitation.", "",
     ("Hi Sam,\n\nThank you for the invitation. Unfortunately I can't attend the meeting on Thursday "
      "because of a prior commitment. Could you share the notes afterwards?\n\nBest regards,\nAlex")),
    ("What is the largest planet in the solar system?", "",
     "Jupiter is the largest planet in the solar system."),
    ("Explain the difference between weather and climate.", "",
     ("Weather is the state of the atmosphere over hours or days; climate is the average pattern of "
      "weather in a region over many years.")),
    ("Count the vowels in the word.", "education", "The word 'education' has five vowels: e, u, a, i, o."),
    ("Suggest a name for a friendly cat.", "", "How about 'Biscuit'?"),
    ("What does CPU stand for?", "", "CPU stands for Central Processing Unit."),
    ("Turn the sentence into a question.", "The train leaves at noon.", "Does the train leave at noon?"),
    ("How many minutes are in three hours?", "", "There are 180 minutes in three hours."),
    ("Name two renewable sources of energy.", "", "Solar power and wind power."),
    ("Rewrite the sentence in the passive voice.", "The chef cooked the meal.",
     "The meal was cooked by the chef."),
    ("What is the square root of 81?", "", "The square root of 81 is 9."),
    ("Describe the color blue to someone who cannot see.", "",
     "Blue feels like cool water on your skin or a fresh breeze: calm, open and quiet."),
    ("Who painted the Mona Lisa?", "", "Leonardo da Vinci painted the Mona Lisa."),
    ("Write a Python function that returns the square of a number.", "", "def square(x):\n    return x * x"),
    ("Identify the verb in the sentence.", "The dog barked loudly.", "The verb is 'barked'."),
    ("What is the freezing point of water in Fahrenheit?", "", "Water freezes at 32 °F."),
    ("List three fruits that are yellow.", "", "Banana, lemon and pineapple."),
    ("Explain what a noun is.", "",
     "A noun is a word that names a person, place, thing or idea, such as 'teacher', 'city' or 'freedom'."),
    ("Convert the distance from kilometers to meters.", "3.5 km", "3.5 km is 3,500 meters."),
    ("What is the longest river in the world?", "",
     ("The Nile is usually listed as the longest river, at about 6,650 km, though some measurements favor "
      "the Amazon.")),
    ("Give an example of a simile.", "", "Her smile was as bright as the sun."),
    ("Calculate the area of a rectangle.", "length 8 cm, width 5 cm",
     "The area is 8 × 5 = 40 square centimeters."),
    ("Which gas do humans need to breathe to survive?", "", "Humans need oxygen."),
    ("Make the sentence more formal.", "Hey, can you send me the report?",
     "Could you please send me the report?"),
    ("What language is mainly spoken in Brazil?", "", "Portuguese is the main language of Brazil."),
    ("Name the author of 'Pride and Prejudice'.", "", "Jane Austen wrote 'Pride and Prejudice'."),
    ("Split the sentence into words.", "Cats sleep a lot", '["Cats", "sleep", "a", "lot"]'),
    ("How many sides does a hexagon have?", "", "A hexagon has six sides."),
    ("Give one advantage of riding a bicycle to work.", "",
     "It is good exercise and costs far less than driving."),
    ("What is the opposite of 'north'?", "", "South."),
    ("Write a one-sentence motivational quote.", "", "Small steps taken every day add up to big changes."),
)

PREFERENCE_MINI = (
    ("What is the capital of Japan?", "The capital of Japan is Tokyo.", "The capital of Japan is Kyoto."),
    ("How many legs does a spider have?", "A spider has eight legs.", "A spider has six legs."),
    ("What is 15 + 27?", "15 + 27 = 42.", "15 + 27 = 32."),
    ("Is the Sun a star?",
     "Yes. The Sun is a medium-sized star, a ball of hot plasma powered by nuclear fusion.",
     "No, the Sun is a planet."),
    ("How do I boil an egg?",
     ("Put the egg in a pot of cold water, bring it to a boil, then simmer 9-12 minutes for hard-boiled "
      "(6-7 for soft). Cool it in cold water before peeling."),
     "Just put it in water."),
    ("What does a thermometer measure?", "A thermometer measures temperature.",
     "A thermometer measures air pressure."),
    ("Translate 'thank you' into Spanish.", "'Thank you' in Spanish is 'gracias'.",
     "'Thank you' in Spanish is 'merci'."),
    ("Who was the first person to walk on the Moon?",
     "Neil Armstrong, on 20 July 1969, during the Apollo 11 mission.",
     "Yuri Gagarin walked on the Moon first."),
    ("Can you recommend a way to fall asleep faster?",
     ("Keep a regular bedtime, avoid screens and caffeine in the evening, and keep your bedroom cool, "
      "dark and quiet."),
     "Drink a few cups of coffee before bed."),
    ("What is H2O?", "H2O is the chemical formula for water: two hydrogen atoms bonded to one oxygen atom.",
     "H2O is a type of salt."),
    ("Write a greeting for a birthday card.",
     "Happy birthday! Wishing you a year full of laughter, good health and wonderful surprises.",
     "birthday."),
    ("How many days are in a leap year?", "A leap year has 366 days.", "A leap year has 365 days."),
    ("Why is the sky blue?",
     ("Air molecules scatter short blue wavelengths of sunlight much more than red ones, so blue light "
      "reaches our eyes from every part of the sky."),
     "Because it reflects the ocean."),
    ("What is the plural of 'mouse'?", "The plural of 'mouse' is 'mice'.",
     "The plural of 'mouse' is 'mouses'."),
    ("Name a mammal that can fly.", "The bat is a mammal that can truly fly.",
     "The penguin is a mammal that can fly."),
    ("How can I make my password more secure?",
     ("Use a long passphrase of several random words, a different one for each site, and turn on "
      "two-factor authentication. A password manager helps keep track."),
     "Use your birthday so you don't forget it."),
    ("What is the freezing point of water in Celsius?", "Water freezes at 0 °C.", "Water freezes at 10 °C."),
    ("Summarize the story of Cinderella in one sentence.",
     ("A kind young woman mistreated by her stepfamily goes to a royal ball with a fairy godmother's "
      "help, loses a glass slipper, and is found and married by the prince."),
     "It is a story."),
    ("What is 9 × 7?", "9 × 7 = 63.", "9 × 7 = 56."),
    ("Which ocean is the largest?", "The Pacific Ocean is the largest.",
     "The Atlantic Ocean is the largest."),
    ("How do I politely ask a coworker for help?",
     ("Try: 'Hi Maria, when you have a moment, could you help me with the quarterly report? I'm stuck on "
      "the sales figures.'"),
     "Tell them to do it now."),
    ("What is the main ingredient in guacamole?", "Avocado is the main ingredient in guacamole.",
     "Tomato is the main ingredient in guacamole."),
    ("Is it safe to look directly at the Sun?",
     ("No. Looking directly at the Sun can permanently damage your eyes; use certified eclipse glasses or "
      "an indirect viewing method."),
     "Yes, it is safe if you only look for a few minutes."),
    ("Give me a word that rhymes with 'cat'.", "'Hat' rhymes with 'cat'.", "'Dog' rhymes with 'cat'."),
    ("What does a plant need to grow?",
     "Light, water, carbon dioxide from the air and nutrients from the soil, at a suitable temperature.",
     "Plants only need darkness."),
    ("Who wrote '1984'?", "George Orwell wrote '1984'.", "Aldous Huxley wrote '1984'."),
    ("How many hours are in a day?", "A day has 24 hours.", "A day has 12 hours."),
    ("Explain what recycling is.",
     ("Recycling is collecting used materials such as paper, glass and plastic and processing them into "
      "new products, which saves resources and reduces waste."),
     "Recycling is throwing things away."),
    ("What is the speed of light, roughly?",
     "About 300,000 kilometers per second (299,792 km/s) in a vacuum.", "About 300 kilometers per hour."),
    ("What should I do if I cut my finger slightly?",
     ("Rinse the cut with clean water, press gently with a clean cloth until it stops bleeding, then "
      "cover it with a bandage. See a doctor if it is deep or keeps bleeding."),
     "Ignore it and keep working."),
)

# Short general-knowledge paragraphs written for swiftlike; plain text for `swiftlike pt`.
TEXT_MINI = (
    ("The water cycle moves water between the oceans, the air and the land. Sunlight warms the sea and "
     "turns some of its water into vapor, which rises and cools into clouds. When the droplets in a cloud "
     "grow heavy enough, they fall as rain or snow, and rivers carry much of that water back to the sea."),
    ("Bees visit flowers to collect nectar and pollen. As they move from one blossom to the next, they "
     "carry pollen with them, which lets many plants make seeds and fruit. A large share of the fruit and "
     "vegetables people eat depends on this quiet work."),
    ("A lighthouse warns ships away from rocks and shallow water. Each lighthouse flashes its light in its "
     "own pattern, so a sailor who counts the flashes can tell which one it is and work out where the ship "
     "is along the coast."),
    ("Bread rises because of yeast, a tiny fungus that feeds on the sugars in flour. As it feeds, it "
     "releases bubbles of carbon dioxide that get trapped in the stretchy dough. Baking sets the dough "
     "around those bubbles, which is why a slice of bread is full of small holes."),
    ("The Moon has no light of its own; it reflects light from the Sun. As the Moon travels around the "
     "Earth, we see different amounts of its sunlit side, from a thin crescent to a full disc. One cycle "
     "of these phases takes about twenty-nine and a half days."),
    ("Maps shrink the world to fit on a page. A scale bar tells the reader how a distance on the map "
     "compares with the real distance, and a compass rose shows which way is north. Contour lines, drawn "
     "where the land has the same height, reveal hills and valleys on a flat sheet of paper."),
    ("Volcanoes form where molten rock from deep inside the Earth finds a way to the surface. Some erupt "
     "violently, throwing ash high into the sky, while others release slow rivers of lava. Over thousands "
     "of years, repeated eruptions can build mountains and even entire islands."),
    ("A library lends books so that many people can read them without each buying a copy. Books are "
     "usually arranged by subject with a numbering system, so titles on the same topic sit side by side. "
     "Many libraries also lend music, films and e-books, and offer quiet places to study."),
    ("Trees add a new layer of wood under their bark every growing season. In a cut trunk, each layer "
     "shows up as a ring, wide in good years and narrow in dry or cold ones. Counting the rings gives the "
     "age of the tree, and their widths tell a story about past weather."),
    ("Recycling turns used materials into new products. Glass and aluminum can be melted down and reshaped "
     "again and again, while paper can be pulped and made into fresh sheets a few times. Sorting waste "
     "correctly at home makes the whole process cheaper and cleaner."),
    ("The heart is a muscle about the size of a fist. It beats around seventy times a minute at rest, "
     "pushing blood through a vast network of vessels. The blood carries oxygen and nutrients to every part "
     "of the body and takes waste away."),
    ("Rainbows appear when sunlight shines through raindrops. Each drop bends the light and splits it into "
     "its colors, from red on the outside of the bow to violet on the inside. To see a rainbow, you need "
     "the Sun behind you and rain in front of you."),
    ("Chess is played on a board of sixty-four squares by two players, each with sixteen pieces. Every "
     "kind of piece moves in its own way: the rook in straight lines, the bishop along diagonals, the "
     "knight in an L shape. The game ends when one king is trapped and cannot escape capture."),
    ("A seed holds a tiny plant and a store of food to get it started. When it has water, air and the "
     "right temperature, it swells and splits its coat. A root grows down first, then a shoot pushes up "
     "toward the light and opens its first leaves."),
    ("Penguins are birds that cannot fly, but they are superb swimmers. Their wings have become stiff "
     "flippers, and their smooth bodies slip through the water with little effort. Most penguins live in "
     "the Southern Hemisphere, many of them in very cold seas."),
    ("Clocks once relied on swinging pendulums or wound springs to keep time. Most modern clocks and "
     "watches count the vibrations of a small quartz crystal, which shakes thousands of times a second "
     "at a very steady rate. The most precise clocks of all measure the behavior of atoms."),
    ("Deserts are places that receive very little rain, not necessarily places that are hot. Some deserts "
     "are covered in sand dunes, but many are rocky plains, and a few are frozen. Plants there often have "
     "deep roots or thick stems that store water for long dry spells."),
    ("Wind turbines turn moving air into electricity. The wind pushes on the long blades, which spin a "
     "shaft connected to a generator. Turbines are often grouped together on hills or out at sea, where "
     "the wind is stronger and steadier."),
    ("Honey keeps for a very long time without spoiling. It contains little water and a lot of sugar, and "
     "it is slightly acidic, so most germs cannot grow in it. Bees make it by collecting nectar and "
     "letting much of its water evaporate inside the hive."),
    ("Mountains can be built when the plates of the Earth's crust push against each other. The rock "
     "between them crumples and is forced upward over millions of years. Wind, water and ice then wear the "
     "peaks down, so young mountains tend to be sharp and old ones rounded."),
    ("A thermometer measures temperature. Older designs use a liquid in a thin glass tube that expands "
     "and climbs as it warms. Digital thermometers instead measure how an electrical part changes with "
     "heat and show the result as a number."),
    ("Octopuses have eight flexible arms lined with suckers that can taste what they touch. They can "
     "change the color and texture of their skin in a moment to blend in with rocks or coral. Many are "
     "clever at solving puzzles, such as opening a jar to reach food inside."),
    ("The printing press made books far cheaper to produce. Before it, each copy had to be written out by "
     "hand, which took months. With movable type, a printer could arrange letters once and press many "
     "identical pages, and ideas began to spread much faster."),
    ("Sleep gives the body and the brain time to recover. During the night we pass through several cycles "
     "of light sleep, deep sleep and dreaming. Most adults feel and work best with seven to nine hours "
     "each night."),
    ("Coral reefs look like rock, but they are built by colonies of tiny animals called polyps. Each polyp "
     "makes a hard cup of limestone around itself, and over centuries these cups pile up into reefs. Reefs "
     "shelter a huge variety of fish and other sea life."),
    ("A bicycle turns the push of a rider's legs into forward motion with very little wasted effort. The "
     "pedals drive a chain that turns the rear wheel, and gears let the rider choose between easy pedaling "
     "and more speed. On flat ground a cyclist can travel several times faster than a walker."),
    ("Salt has been valued for thousands of years, both to flavor food and to preserve it. It can be "
     "gathered by letting seawater evaporate in shallow ponds or mined from thick underground layers left "
     "by ancient seas. Too much salt in the diet, however, can raise blood pressure."),
    ("Glaciers are rivers of ice that move slowly downhill under their own weight. As they flow, they "
     "scrape the ground beneath them and carve wide valleys shaped like the letter U. Many glaciers are "
     "shrinking as the climate warms."),
    ("A compass needle is a small magnet that lines up with the Earth's magnetic field. One end points "
     "roughly toward the north, which has helped travelers and sailors find their way for centuries. "
     "Nearby iron or electronics can pull the needle off course."),
    ("Tea is made by soaking the dried leaves of the tea plant in hot water. Green, black and oolong teas "
     "all come from the same plant; the difference lies in how the leaves are processed after picking. "
     "Herbal drinks made from other plants are often called tea as well."),
    ("Bats find their way in the dark by making high-pitched calls and listening for the echoes. From the "
     "returning sound they can judge the size, shape and distance of objects, even small flying insects. "
     "This skill is called echolocation."),
    ("The Sun is a star, a huge ball of hot gas that produces energy by fusing hydrogen into helium in its "
     "core. Its light takes a little more than eight minutes to reach the Earth. Without that light and "
     "warmth, life on our planet could not exist."),
    ("Vaccines train the immune system to recognize a germ before a real infection happens. They contain "
     "a harmless piece or weakened form of the germ, or instructions for making one of its parts. If the "
     "real germ appears later, the body is ready to fight it quickly."),
    ("Ants live in large colonies in which different members do different jobs. Workers gather food, care "
     "for the young and defend the nest, while the queen lays eggs. Ants leave scent trails that guide "
     "their nestmates to a good source of food."),
    ("Paper is made from plant fibers, most often from wood. The wood is broken down into a wet pulp, "
     "spread thin on a screen and pressed and dried into sheets. Adding recycled paper to the pulp saves "
     "trees and energy."),
    ("Thunder is the sound of air expanding suddenly as lightning heats it. Light travels much faster than "
     "sound, so we see the flash before we hear the rumble. Counting the seconds between them and dividing "
     "by three gives a rough distance to the storm in kilometers."),
    ("Camels are well suited to life in the desert. They can go for days without drinking and then take "
     "in a great deal of water at once. Their humps store fat, not water, and their wide feet keep them "
     "from sinking into soft sand."),
    ("A budget is a plan for how to use money. It lists expected income and spending, so a person can see "
     "in advance whether there will be enough for everything. Setting a little aside each month builds "
     "savings for emergencies and future plans."),
    ("Earthquakes happen when rocks deep underground suddenly slip along a crack called a fault. The "
     "energy released travels outward as waves that shake the ground. Scientists measure earthquakes with "
     "instruments called seismometers, which record the waves even from far away."),
    ("Music is built from rhythm, melody and harmony. Rhythm is the pattern of beats in time, melody is a "
     "sequence of notes that forms a tune, and harmony is what we hear when several notes sound together. "
     "People in every culture make music of some kind."),
)


def text_mini_rows() -> list[dict]:
    return [{"text": text} for text in TEXT_MINI]


def _script(file_name: str):
    """Another generator script of scripts/, loaded by path: scripts/ is not a package."""
    path = Path(__file__).with_name(file_name)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def builtin_files() -> dict[str, list[dict]]:
    """File name -> rows; the tests compare it with the committed files."""
    rl_rows, sft_rows = arithmetic_rows()
    return {
        "arithmetic.jsonl": rl_rows,
        "arithmetic_sft.jsonl": sft_rows,
        "arithmetic_preference.jsonl": arithmetic_preference_rows(_expressions(rl_rows + sft_rows)),
        "self_cognition.jsonl": self_cognition_rows(),
        "alpaca_mini.jsonl": [{"instruction": i, "input": x, "output": o} for i, x, o in ALPACA_MINI],
        "preference_mini.jsonl": [{"query": q, "chosen": c, "rejected": r} for q, c, r in PREFERENCE_MINI],
        "text_mini.jsonl": text_mini_rows(),
        **_script("make_agent_datasets.py").agent_files(),
        **_script("make_frozen_lake_dataset.py").frozen_lake_files(),
        **_script("make_code_tasks.py").code_task_files(),
    }


def main() -> None:
    for name, rows in builtin_files().items():
        atomic_write_jsonl(DATA_DIR / name, rows)
        print(f"{DATA_DIR / name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
