"""Writes articles.jsonl: one ordinary article per language that every filter must keep."""

import json

ARTICLES = {
    "en": (
        "The river that runs through the old town has shaped the lives of its people for "
        "centuries. Farmers used the water to irrigate their fields, and millers built wheels "
        "along the banks to grind grain into flour.\n\n"
        "In the nineteenth century the river became a route for trade. Boats carried timber, "
        "wool and coal to the harbour, and the town grew quickly with the new wealth.\n\n"
        "Today the banks are lined with parks and footpaths. Families walk there on weekends, "
        "and children learn to fish with their grandparents. The council has restored several "
        "of the old mills, which now house a museum and a small bakery.\n\n"
        "Visitors who come in spring can watch the herons that nest in the tall trees near the "
        "bridge. It is a quiet place to rest and to think about how much the town owes to the "
        "water that flows past it every day."
    ),
    "de": (
        "Der Fluss, der durch die Altstadt fließt, hat das Leben der Menschen seit "
        "Jahrhunderten geprägt. Die Bauern nutzten das Wasser, um ihre Felder zu bewässern, "
        "und die Müller bauten Räder am Ufer, um das Getreide zu mahlen.\n\n"
        "Im neunzehnten Jahrhundert wurde der Fluss zu einem wichtigen Handelsweg. Boote "
        "brachten Holz, Wolle und Kohle zum Hafen, und die Stadt wuchs mit dem neuen Wohlstand "
        "sehr schnell.\n\n"
        "Heute sind die Ufer von Parks und Wanderwegen gesäumt. Familien gehen dort am "
        "Wochenende spazieren, und die Kinder lernen mit ihren Großeltern das Angeln. Die "
        "Stadt hat mehrere der alten Mühlen restauriert, in denen sich jetzt ein Museum und "
        "eine kleine Bäckerei befinden.\n\n"
        "Wer im Frühling kommt, kann die Reiher beobachten, die in den hohen Bäumen an der "
        "Brücke nisten. Es ist ein ruhiger Ort, um sich auszuruhen und darüber nachzudenken, "
        "wie viel die Stadt dem Wasser verdankt."
    ),
    "ru": (
        "Река, которая течёт через старый город, веками определяла жизнь его жителей. "
        "Крестьяне использовали воду для полива полей, а мельники строили колёса на берегу, "
        "чтобы молоть зерно.\n\n"
        "В девятнадцатом веке река стала важным торговым путём. Лодки везли лес, шерсть и "
        "уголь в гавань, и город быстро рос вместе с новым богатством.\n\n"
        "Сегодня на берегах разбиты парки и пешеходные дорожки. По выходным там гуляют семьи, "
        "а дети учатся ловить рыбу вместе с дедушками. Город восстановил несколько старых "
        "мельниц, в которых теперь находятся музей и небольшая пекарня.\n\n"
        "Весной здесь можно увидеть цапель, которые гнездятся на высоких деревьях у моста. "
        "Это тихое место, где можно отдохнуть и подумать о том, как много город получил от "
        "реки, что течёт мимо него каждый день."
    ),
    "zh": (
        "流经老城的这条河，几百年来一直影响着当地人的生活。农民用河水灌溉田地，磨坊主在河岸上"
        "修建水车，把粮食磨成面粉。\n\n"
        "到了十九世纪，这条河成为重要的商路。船只把木材、羊毛和煤炭运到港口，小城也随着新的财富"
        "迅速发展起来。\n\n"
        "如今，河岸两旁是公园和步道。周末的时候，一家人常常在这里散步，孩子们跟着爷爷奶奶学习"
        "钓鱼。市政府修复了几座老磨坊，现在里面有一个博物馆和一家小面包店。\n\n"
        "春天来这里的游客，可以看到在桥边高树上筑巢的苍鹭。这是一个安静的地方，适合休息，也"
        "适合想一想这座城市从这条每天流过的河里得到了多少。"
    ),
    "ja": (
        "旧市街を流れるこの川は、何世紀にもわたって人々の暮らしを形づくってきた。農家は川の水で"
        "畑をうるおし、粉屋は岸辺に水車を建てて穀物をひいた。\n\n"
        "十九世紀になると、川は大切な交易の道になった。船が材木や羊毛や石炭を港へ運び、町は新しい"
        "富とともに急速に大きくなった。\n\n"
        "今では岸辺に公園と遊歩道が続いている。週末には家族が散歩を楽しみ、子どもたちは祖父母と"
        "一緒に釣りを覚える。市はいくつかの古い水車小屋を修復し、そこには博物館と小さなパン屋が"
        "入っている。\n\n"
        "春に訪れると、橋の近くの高い木に巣を作るサギを見ることができる。ここは静かに休みながら、"
        "毎日そばを流れる川から町がどれほど多くのものを受け取ってきたかを考えられる場所だ。"
    ),
    "fr": (
        "La rivière qui traverse la vieille ville a façonné la vie de ses habitants pendant des "
        "siècles. Les paysans utilisaient l'eau pour irriguer leurs champs, et les meuniers "
        "construisaient des roues sur les berges pour moudre le grain.\n\n"
        "Au dix-neuvième siècle, la rivière est devenue une route commerciale. Des bateaux "
        "transportaient du bois, de la laine et du charbon vers le port, et la ville a grandi "
        "très vite avec cette nouvelle richesse.\n\n"
        "Aujourd'hui, les berges sont bordées de parcs et de sentiers. Les familles s'y "
        "promènent le week-end, et les enfants apprennent à pêcher avec leurs grands-parents. "
        "La ville a restauré plusieurs des vieux moulins, qui abritent maintenant un musée et "
        "une petite boulangerie.\n\n"
        "Au printemps, les visiteurs peuvent observer les hérons qui nichent dans les grands "
        "arbres près du pont. C'est un endroit calme pour se reposer et pour penser à tout ce "
        "que la ville doit à la rivière."
    ),
}

if __name__ == "__main__":
    with open("articles.jsonl", "w", encoding="utf-8") as f:
        for lang, text in ARTICLES.items():
            f.write(json.dumps({"id": f"article-{lang}", "lang": lang, "text": text},
                               ensure_ascii=False) + "\n")
