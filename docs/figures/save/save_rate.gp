# Drawn by `kvtier report`; redraw from this folder with: gnuplot save_rate.gp
set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'
set output 'save_rate.svg'
set termoption noenhanced
set title 'Saves: rate offered and absorbed against the target rate'
set xlabel 'target rate (GB/s)'
set ylabel 'GB/s (1e9 bytes/s)'
set grid
set key below
set yrange [0:*]
$d0 << EOD
0.589689 0
0.884534 0
1.03196 0
1.10567 0
1.17938 0
2.35876 0
4.71751 0
EOD
$d1 << EOD
0.589689 0
0.884534 0
1.03196 0
1.10567 0
1.17938 0
2.35876 0
4.71751 0
EOD
$d2 << EOD
0.589689 0.874601
4.71751 0.874601
EOD
$d3 << EOD
1.17938 0
1.3268 0
1.47422 0
1.76907 0
2.35876 0
4.71751 0
EOD
$d4 << EOD
1.17938 0
1.3268 0
1.47422 0
1.76907 0
2.35876 0
4.71751 0
EOD
$d5 << EOD
1.17938 0.841116
4.71751 0.841116
EOD
$d6 << EOD
0.589689 0
0.884534 0
0.958245 0
1.03196 0
1.17938 0
2.35876 0
4.71751 0
EOD
$d7 << EOD
0.589689 0
0.884534 0
0.958245 0
1.03196 0
1.17938 0
2.35876 0
4.71751 0
EOD
$d8 << EOD
0.589689 0.650975
4.71751 0.650975
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'offered: file:///work/bench-save, llama-3.1-8b (save-file-llama-8b-0535.json)', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'absorbed: file:///work/bench-save, llama-3.1-8b (save-file-llama-8b-0535.json)', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 2 title 'fio O_DIRECT write, same disk: file:///work/bench-save, llama-3.1-8b (save-file-llama-8b-0535.json)', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 4 dt 1 title 'offered: file:///work/bench-save, llama-3.1-8b (save-file-llama-8b.json)', \
     $d4 using 1:2 with linespoints lw 2 pt 7 lc 5 dt 1 title 'absorbed: file:///work/bench-save, llama-3.1-8b (save-file-llama-8b.json)', \
     $d5 using 1:2 with linespoints lw 2 pt 7 lc 6 dt 2 title 'fio O_DIRECT write, same disk: file:///work/bench-save, llama-3.1-8b (save-file-llama-8b.json)', \
     $d6 using 1:2 with linespoints lw 2 pt 7 lc 7 dt 1 title 'offered: fs:///work/bench-save, llama-3.1-8b (save-fs-llama-8b.json)', \
     $d7 using 1:2 with linespoints lw 2 pt 7 lc 8 dt 1 title 'absorbed: fs:///work/bench-save, llama-3.1-8b (save-fs-llama-8b.json)', \
     $d8 using 1:2 with linespoints lw 2 pt 7 lc 9 dt 2 title 'fio O_DIRECT write, same disk: fs:///work/bench-save, llama-3.1-8b (save-fs-llama-8b.json)'
